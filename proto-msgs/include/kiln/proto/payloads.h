// Job payloads that travel through the broker (DESIGN §1-§7). Job ids are deterministic:
// "<program_id>:<step>", so a duplicate follow-up is dropped by the broker (ids.h builds them). One candidate:
//   ingest (IngestRequest) -> score (CampaignStart)
//   score -> propose (ProposalRequest) -> compile (CompileRequest) -> test.<backend> (TestRequest)
//         -> score (ScoreResult) -> [test.<backend> confirm] -> promote (PromoteRequest) -> score (PromoteOutcome)
//   a job dead-lettered by the broker, or by its worker -> score (DeadLetter)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/proto/codec.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/measurement.h"
#include "kiln/proto/process.h"
#include "kiln/proto/records.h"
#include "kiln/proto/wire.h"

namespace kiln::proto {

// Every payload for the "score" service says what it is in "kind".
namespace kind {
inline constexpr std::string_view kCampaignStart = "campaign.start";
inline constexpr std::string_view kResult = "result";
inline constexpr std::string_view kDead = "dead";
inline constexpr std::string_view kPromoted = "promoted";
inline constexpr std::string_view kCampaignCancel = "campaign.cancel";
}  // namespace kind

// Service names.
namespace svc {
inline constexpr std::string_view kBroker = "broker";
inline constexpr std::string_view kIngest = "ingest";
inline constexpr std::string_view kPropose = "propose";
// Proposals of campaigns whose proposer is "external": served by authenticated external bridges.
inline constexpr std::string_view kProposeExternal = "propose.external";
inline constexpr std::string_view kCompile = "compile";
inline constexpr std::string_view kTestCpu = "test.cpu";
inline constexpr std::string_view kTestCuda = "test.cuda";
inline constexpr std::string_view kScore = "score";
inline constexpr std::string_view kPromote = "promote";
}  // namespace svc

// "test.cpu" / "test.cuda": the service that tests a backend's candidates.
inline std::string test_service_for(Backend backend) { return "test." + std::string(name(backend)); }

struct IngestRequest {
  std::string campaign_id;
  int64_t budget = 16;
  std::string proposer = "tuner";
  int64_t max_in_flight = 4;
  FileMap files;              // the task package
  double target_speedup = 0;  // 0: the scorer's configured early stop
  int64_t patience = 0;       // 0: the scorer's configured early stop
  template <class V>
  void fields(V& v) {
    v("campaign_id", campaign_id);
    v("budget", budget);
    v("proposer", proposer);
    v("max_in_flight", max_in_flight);
    v("files", files);
    v("target_speedup", target_speedup);
    v("patience", patience);
  }
};

struct CampaignStart {
  std::string kind = std::string(kind::kCampaignStart);
  std::string campaign_id;
  std::string task_id;  // task_id(files): the name of the package's blob
  std::string task_name;
  int64_t budget = 16;  // proposals after program 0
  std::string proposer = "tuner";
  int64_t max_in_flight = 4;
  FileMap files;  // normalized package
  double submitted_at = 0;
  // Optional (v2) early stop; 0 = the scorer's configured default, negative = never.
  double target_speedup = 0;  // stop once the best correct speedup reaches this
  int64_t patience = 0;       // stop after this many scored proposals without a better program
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("campaign_id", campaign_id);
    v("task_id", task_id);
    v("task_name", task_name);
    v("budget", budget);
    v("proposer", proposer);
    v("max_in_flight", max_in_flight);
    v("files", files);
    v("submitted_at", submitted_at);
    v("target_speedup", target_speedup);
    v("patience", patience);
  }
};

// `kiln cancel`: the campaign issues no more proposals; what is in flight finishes and is scored. A
// "score" job with the id job_id::campaign_cancel(campaign_id), answered with the campaign's CampaignInfo.
struct CampaignCancel {
  std::string kind = std::string(kind::kCampaignCancel);
  std::string campaign_id;
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("campaign_id", campaign_id);
  }
};

// A reply travels with its candidate through compile and test and is stored with the program: bounded, as
// an LLM's answer is a few kB (max_tokens) and anything longer is not a reply worth keeping whole.
inline constexpr size_t kMaxRawLlmCodeBytes = 64u << 10;

// One candidate as it moves through propose -> compile -> test -> score.
struct Candidate {
  std::string campaign_id;
  std::string program_id;  // "<campaign_id>/p<index>"
  std::string parent_id;
  int64_t generation = 0;
  int64_t proposal_index = 0;  // 0 = program 0
  std::string proposer;
  // The whole kernel file. A proposal may differ from the task's kernel only inside the editable regions
  // (task::check_regions_only); the compiler refuses anything else, and the scorer checks again.
  std::string code;
  std::map<std::string, std::string> params;  // template parameters, passed as -D defines
  std::string notes;                          // what the proposer says it tried
  // Optional (v2): what the proposer reports about how it got here: "model", "prompt_id",
  // "parent_prompt_id", "prompt_text" (a new strategy only), "prompt_tokens", "completion_tokens".
  std::map<std::string, std::string> metadata;
  // Optional (v3), in a CompileRequest only: the new bodies of the task kernel's editable regions, one per
  // region in order, instead of `code` (which is then empty). The compiler splices them into the task's
  // kernel and sends the result on as `code`, with `regions` cleared.
  std::vector<std::string> regions;
  // Optional (v4): what an LLM proposer answered, as it came, before the code was extracted from it (at
  // most kMaxRawLlmCodeBytes; empty for the tuner). Kept with the program as Program.raw_llm_code.
  std::string raw_llm_code;
  template <class V>
  void fields(V& v) {
    v("campaign_id", campaign_id);
    v("program_id", program_id);
    v("parent_id", parent_id);
    v("generation", generation);
    v("proposal_index", proposal_index);
    v("proposer", proposer);
    v("code", code);
    v("params", params);
    v("notes", notes);
    v("metadata", metadata);
    v("regions", regions);
    v("raw_llm_code", raw_llm_code);
  }
};

// Another program of the archive shown to a proposer for ideas (v2).
struct Inspiration {
  Candidate cand;
  std::string eval_log;
  double combined_score = 0;
  std::string cell;  // "memory=2,compute=1,..."
  template <class V>
  void fields(V& v) {
    v("cand", cand);
    v("eval_log", eval_log);
    v("combined_score", combined_score);
    v("cell", cell);
  }
};

// A strategy section of the prompt (meta-prompt) and how well it has done (v2).
struct PromptStrategy {
  std::string prompt_id;  // "" = the proposer's built-in strategy
  std::string parent_prompt_id;
  std::string text;
  double fitness = 0;  // best combined score of the programs it produced
  int64_t uses = 0;
  std::vector<double> history;  // combined scores of its programs, oldest first (bounded)
  template <class V>
  void fields(V& v) {
    v("prompt_id", prompt_id);
    v("parent_prompt_id", parent_prompt_id);
    v("text", text);
    v("fitness", fitness);
    v("uses", uses);
    v("history", history);
  }
};

// A task package as a blob (the content of ProposalRequest.task_blob and its kin).
struct TaskFiles {
  FileMap files;
  template <class V>
  void fields(V& v) {
    v("files", files);
  }
};

// A package's one identity: the sha256 of its blob (task_blob_bytes), which is the name the blob store
// gives it. CampaignStart.task_id, TaskRef.task_id and the task_blob of every job of a campaign are this
// one string. The blob carries the envelope's version, so a schema version bump renames every package.
std::string task_id(const FileMap& files);
// The content of a package's blob: the encoded TaskFiles.
std::string task_blob_bytes(const FileMap& files);

namespace detail {
// Older writers named a confirmation by its program id ("<program_id>#confirm") and purpose "eval":
// read as today's (the program's own id, purpose confirm). Called by decode() only (codec.h upgrade()).
void upgrade_confirmation(Candidate& cand, Purpose& purpose);
}  // namespace detail

struct ProposalRequest {
  Candidate parent;        // the program to start from (code, params)
  std::string program_id;  // id the new candidate gets
  int64_t proposal_index = 0;
  std::string proposer = "tuner";
  std::string parent_eval_log;
  int64_t seed = 0;
  FileMap files;  // the task package, or empty when `task_blob` names it
  // Optional (schema 3): the task package as a blob of the broker's store (an encoded TaskFiles, named by its
  // sha256). A job carries `files` or names them here; receivers fetch a name once (messaging/blobs.h).
  std::string task_blob;
  // Optional (v2), from the MAP-Elites archive: where the parent sits, ideas from other cells, the cell
  // the proposer is asked to aim for, and the strategy section to use (evolve_prompt: rewrite it first).
  int64_t island = 0;
  std::string parent_cell;
  std::vector<Inspiration> inspirations;
  std::string target_cell;
  PromptStrategy strategy;
  bool evolve_prompt = false;
  int64_t budget = 0;         // the campaign's proposals (0 = unknown)
  bool tuner_blocks = false;  // the tuner samples blocks sized by `budget` (llm_bridge/proposer.h)
  // Optional (schema 3): the screening bar of the candidate's first measurement, from the campaign as it
  // stood (its best program's lowest per-case lower bound; 0 = none): carried on to the compile and test
  // jobs. A candidate whose interval cannot reach it cannot become the campaign's best.
  double screen_below = 0;
  // Optional (schema 3): whether the proposer reads profiler feedback (TestReport.profile): false for the
  // tuner, which picks parameters by score alone. Carried on to the compile and test jobs; the tester
  // profiles no candidate whose proposer reads none (tester.profile_scope "contenders").
  bool want_profile = true;
  template <class V>
  void fields(V& v) {
    v("parent", parent);
    v("program_id", program_id);
    v("proposal_index", proposal_index);
    v("proposer", proposer);
    v("parent_eval_log", parent_eval_log);
    v("seed", seed);
    v("files", files);
    v("island", island);
    v("parent_cell", parent_cell);
    v("inspirations", inspirations);
    v("target_cell", target_cell);
    v("strategy", strategy);
    v("evolve_prompt", evolve_prompt);
    v("budget", budget);
    v("tuner_blocks", tuner_blocks);
    v("task_blob", task_blob);
    v("screen_below", screen_below);
    v("want_profile", want_profile);
  }
};

struct CompileRequest {
  Candidate cand;
  std::optional<Backend> backend;  // cuda | cpu | "" (none: the task's)
  std::string arch;                // nvcc target (sm_90) or "native"
  FileMap files;                   // the task package (reference source, task.yaml), or empty when `task_blob` names it
  std::string task_blob;           // optional (schema 3): see ProposalRequest
  // For the test job (FollowUp::avoid_worker, ::device): a tester to avoid while another is connected,
  // and the device model it must run on (optional). Empty: any.
  std::string avoid_tester, tester_device;
  double screen_below = 0;   // optional (schema 3): ProposalRequest.screen_below, for the test job
  bool want_profile = true;  // optional (schema 3): ProposalRequest.want_profile, for the test job
  // Optional: what the chain measures, copied into the test job (its id and the tester's way follow it).
  Purpose purpose = Purpose::kEval;
  template <class V>
  void fields(V& v) {
    v("cand", cand);
    v("backend", backend);
    v("arch", arch);
    v("files", files);
    v("avoid_tester", avoid_tester);
    v("tester_device", tester_device);
    v("task_blob", task_blob);
    v("screen_below", screen_below);
    v("want_profile", want_profile);
    v("purpose", purpose);
  }
  void upgrade() { detail::upgrade_confirmation(cand, purpose); }
};

struct BuildInfo {
  bool ok = false;
  std::string compiler;  // "g++" | "nvcc"
  std::string flags;
  std::string toolchain;  // version line
  std::string log;        // trimmed compiler output
  double duration_s = 0;
  bool cache_hit = false;
  std::string kernel_sha256;  // of the built shared object
  int64_t registers = -1;     // per thread (nvcc), -1 unknown
  int64_t shared_bytes = -1;
  int64_t spill_bytes = -1;
  int64_t stack_bytes = -1;
  // Optional (v4): the compiler run of the candidate, its streams apart (`log` is the two of them together,
  // trimmed around the first error). Within max_log_bytes together.
  ProcessResult process;
  template <class V>
  void fields(V& v) {
    v("ok", ok);
    v("compiler", compiler);
    v("flags", flags);
    v("toolchain", toolchain);
    v("log", log);
    v("duration_s", duration_s);
    v("cache_hit", cache_hit);
    v("kernel_sha256", kernel_sha256);
    v("registers", registers);
    v("shared_bytes", shared_bytes);
    v("spill_bytes", spill_bytes);
    v("stack_bytes", stack_bytes);
    v("process", process);
  }
};

struct TestRequest {
  Candidate cand;
  Purpose purpose = Purpose::kEval;  // eval | confirm
  FileMap files;                     // or empty when `task_blob` names them
  Bytes kernel_so;
  Bytes reference_so;  // or empty when `reference_blob` names it
  BuildInfo build;
  // Optional (schema 3): blobs of the broker's store in place of `files` and `reference_so` (ProposalRequest).
  std::string task_blob;
  std::string reference_blob;
  // Optional (schema 3): "deflate" when `kernel_so` is zlib-deflated (kernel_library() reads it either way);
  // `kernel_so_size` is then its size as built.
  std::string kernel_so_encoding;
  int64_t kernel_so_size = 0;
  // Optional (schema 3): the campaign's screening bar (ProposalRequest.screen_below); the tester screens a
  // first measurement at the higher of this and its own tester.timing.screen_below, never a confirmation.
  double screen_below = 0;
  bool want_profile = true;  // optional (schema 3): ProposalRequest.want_profile
  template <class V>
  void fields(V& v) {
    v("cand", cand);
    v("purpose", purpose);
    v("files", files);
    v("kernel_so", kernel_so);
    v("reference_so", reference_so);
    v("build", build);
    v("task_blob", task_blob);
    v("reference_blob", reference_blob);
    v("kernel_so_encoding", kernel_so_encoding);
    v("kernel_so_size", kernel_so_size);
    v("screen_below", screen_below);
    v("want_profile", want_profile);
  }
  void upgrade() { detail::upgrade_confirmation(cand, purpose); }
};

// The kernel library of a TestRequest as built, deflated on the wire when that makes it smaller.
void set_kernel_library(TestRequest& request, std::string so);
// The library as built; a size over `max_bytes`, an unknown encoding or content that does not inflate to the
// size it states is kInvalidArgument.
Result<std::string> kernel_library(const TestRequest& request, size_t max_bytes);

struct WorkerInfo {
  std::string worker_id;
  std::string host;
  std::optional<Backend> backend;  // "" when unknown
  std::string device_name;         // GPU model or CPU model name
  std::string gpu_uuid;
  std::string driver_version;
  std::string runtime_version;
  std::string toolchain;
  double clock_hz = 0;
  double temperature_c = -1;
  template <class V>
  void fields(V& v) {
    v("worker_id", worker_id);
    v("host", host);
    v("backend", backend);
    v("device_name", device_name);
    v("gpu_uuid", gpu_uuid);
    v("driver_version", driver_version);
    v("runtime_version", runtime_version);
    v("toolchain", toolchain);
    v("clock_hz", clock_hz);
    v("temperature_c", temperature_c);
  }
};

// CaseTiming.stop_reason words the driver sets itself (the stopping rule's: noise | stalled | max_time).
namespace stop_reason {
inline constexpr std::string_view kScreened = "screened";  // the interval cannot reach the bar
inline constexpr std::string_view kPrecise = "precise";    // the interval is narrow enough
}  // namespace stop_reason

struct TestReport {
  // The verdict (ids.h). Empty (written "", as the string field always was) where no test ran: the
  // TestReport of a ScoreResult whose stage is propose or compile.
  std::optional<TestStatus> status;
  std::string message;  // one line: "crashed: SIGSEGV", "timed out after 30 s"
  Correctness correctness;
  Performance performance;
  WorkerInfo worker;
  std::string log;  // captured stdout/stderr of the evaluation child, capped
  double duration_s = 0;
  // Optional (v4): the evaluation child's run, its streams apart (`log` is the two of them together);
  // within the tester's max_log_bytes together. Written by the tester, never by the child.
  ProcessResult process;
  // Optional (v4): how the tester ran the evaluation, written by the tester: "evaluator" (kiln-eval |
  // kiln-eval-cuda), "evaluator_sha256" (of its binary: the evaluator's version as built), "kiln_version",
  // the timing options ("timing_mode", "timing_min_samples", "timing_min_time_s", "timing_max_time_s",
  // "timing_max_noise", "timing_warmup_iters"), "timeout_s" and the sandbox's isolation ("isolation_network",
  // "isolation_pids", "isolation_filesystem").
  std::map<std::string, std::string> metadata;
  // Optional: Nsight Compute's view of the candidate's kernels on the first benchmark case, taken by the
  // tester after the verdict in a separate run (never part of the timing); see kiln/cuda/profile.h for
  // the keys. `profile_summary` is one line a proposer can read ("profile on N=4096: 1 kernel, 120.3 us: dram
  // 81 %, sm 12 % of peak; ...: memory bound"), or why there is none ("profiling skipped: ...").
  std::map<std::string, double> profile;
  std::string profile_summary;
  template <class V>
  void fields(V& v) {
    v("status", status);
    v("message", message);
    v("correctness", correctness);
    v("performance", performance);
    v("worker", worker);
    v("log", log);
    v("duration_s", duration_s);
    v("process", process);
    v("metadata", metadata);
    v("profile", profile);
    v("profile_summary", profile_summary);
  }
};

// Sent to "score" when a candidate reaches the end of a stage.
struct ScoreResult {
  std::string kind = std::string(kind::kResult);
  Candidate cand;
  Stage stage = Stage::kTest;        // propose | compile | test
  Purpose purpose = Purpose::kEval;  // eval | confirm
  std::string error;                 // propose/compile failure text
  BuildInfo build;
  TestReport test;
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("cand", cand);
    v("stage", stage);
    v("purpose", purpose);
    v("error", error);
    v("build", build);
    v("test", test);
  }
  void upgrade() { detail::upgrade_confirmation(cand, purpose); }
};

// Sent by the broker to "score" when a job is dead-lettered after max_attempts.
struct DeadLetter {
  std::string kind = std::string(kind::kDead);
  std::string job_id;
  std::string service;
  int attempts = 0;
  std::string reason;
  Bytes payload;  // the dead job's payload (the scorer reads its candidate from it)
  // Optional (v2). True when the last attempt's worker answered "retry": it named a fault of its own side
  // (a toolchain, the evaluator, the task's reference) in `reason`, so the payload was never judged. Also
  // true in the dead letter a worker sends itself with a job it dead-letters (a permanent fault that is not
  // the candidate's, messaging::Outcome::kDeadLetter). False when the worker was lost or the deadline passed.
  bool worker_retry = false;
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("job_id", job_id);
    v("service", service);
    v("attempts", attempts);
    v("reason", reason);
    v("payload", payload);
    v("worker_retry", worker_retry);
  }
};

// Whether `result` is a worker dead-lettering its job itself (messaging::Outcome::kDeadLetter): "failed", with
// the DeadLetter for its job among its follow-ups. Older workers send the same RESULT, so a broker reads it
// from the words alone.
inline bool is_worker_dead_letter(const ResultMsg& result) {
  if (result.outcome != outcome::kFailed) return false;
  for (const auto& f : result.next)
    if (f.service == svc::kScore && job_id::dead_letter_of(f.job_id) == result.job_id) return true;
  return false;
}

struct PromoteRequest {
  std::string campaign_id;
  std::string program_id;
  std::string task_name;
  std::string op;
  Backend backend = Backend::kCpu;
  std::string dtype;
  std::string source;      // the whole kernel file
  std::string source_ext;  // "cu" | "cpp"
  std::map<std::string, std::string> params;
  std::map<std::string, int64_t> shape;  // the benchmark case's dims
  Correctness verification;
  CaseTiming benchmark;     // the first measurement of the first benchmark case (the one `shape` names)
  CaseTiming confirmation;  // the independent second measurement of that case
  // Optional (v4): every benchmark case of each measurement, in task order. Each case's speedup and the
  // lower bound of its interval must clear the bar in both (scoring.h says why every case, not a mean).
  std::vector<CaseTiming> benchmark_cases;
  std::vector<CaseTiming> confirmation_cases;
  std::string timing_method;
  std::string timing_mode;
  WorkerInfo worker;
  WorkerInfo confirm_worker;
  BuildInfo build;
  template <class V>
  void fields(V& v) {
    v("campaign_id", campaign_id);
    v("program_id", program_id);
    v("task_name", task_name);
    v("op", op);
    v("backend", backend);
    v("dtype", dtype);
    v("source", source);
    v("source_ext", source_ext);
    v("params", params);
    v("shape", shape);
    v("verification", verification);
    v("benchmark", benchmark);
    v("confirmation", confirmation);
    v("timing_method", timing_method);
    v("timing_mode", timing_mode);
    v("worker", worker);
    v("confirm_worker", confirm_worker);
    v("build", build);
    v("benchmark_cases", benchmark_cases);
    v("confirmation_cases", confirmation_cases);
  }
};

struct PromoteOutcome {
  std::string kind = std::string(kind::kPromoted);
  std::string campaign_id;
  std::string program_id;
  bool promoted = false;
  std::string kernel_id;
  std::string reason;  // why it was refused
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("campaign_id", campaign_id);
    v("program_id", program_id);
    v("promoted", promoted);
    v("kernel_id", kernel_id);
    v("reason", reason);
  }
};

}  // namespace kiln::proto
