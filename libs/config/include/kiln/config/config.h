// Kiln's configuration (DESIGN §9): one YAML file with a section per service, KILN_<SECTION>_<KEY>
// environment variables override it, then it is validated into an immutable struct. Libraries receive
// values, never files.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::config {

struct BrokerConfig {
  std::string bind = "tcp://127.0.0.1:5555";         // workers and clients
  std::string events_bind = "tcp://127.0.0.1:5556";  // PUB: job state changes
  std::string db_path = "broker.db";                 // relative paths resolve against the state dir
  int64_t max_attempts = 3;
  double heartbeat_interval_s = 1.0;
  int64_t heartbeat_liveness = 4;  // peer dead after this many silent intervals
  int64_t max_message_bytes = 64ll << 20;
  int64_t max_table_mb = 0;  // bound on the job table's file; 0: none (the disk is the bound)
  int64_t blob_store = 1;    // 1: jobs name task packages and built references by blob; 0: they carry them
  // Retention of ended jobs (done, failed, dead): kept this many days and at most this many (0: no limit);
  // a pass every retention_interval_s (0: never) deletes the rest and gives the space back.
  double retention_days = 7;
  int64_t retention_max_jobs = 100000;
  double retention_interval_s = 60;
  // A job that must run on one device model (a confirmation) fails after waiting this long with no worker
  // of that model connected; 0: it waits for ever.
  double device_wait_s = 600;
  std::map<std::string, double> lease_timeout_s = {  // per service; "default" for the rest
      {"default", 60},
      {"compile", 180},
      {"test.cpu", 300},
      {"test.cuda", 300},
      {"propose", 300}};
  int metrics_port = 9470;
  // External bridges (DESIGN §2): a second ROUTER endpoint secured with CURVE; only client keys on the
  // allowlist get through. Empty external_bind: no such endpoint.
  std::string external_bind;
  std::string external_secret_key_file = "broker.key";  // the broker's CURVE pair; relative paths
  std::string external_public_key_file = "broker.pub";  // resolve against the state dir; made if absent
  std::string external_allowlist = "bridges.allow";     // "<name> <z85 public key>" per line
};

struct CompilerConfig {
  std::string cache_dir = "compile-cache";
  double timeout_s = 120;
  std::string cxx = "g++";
  std::string nvcc = "/usr/local/cuda/bin/nvcc";
  std::string cuda_arch = "sm_90";
  std::string nvcc_mode = "graph";  // graph | serial
  std::string huge_pages = "on";    // on | off: the build tools' malloc asks for transparent huge pages
  std::string lean_headers = "on";  // on | off: CUDA builds skip the C++17 special math functions if unused
  int64_t max_log_bytes = 8192;
  int64_t slots = 1;
  // With several slots: CUDA candidates of one source, differing only in their parameters, that arrive
  // together are built as one translation unit of up to batch_max variants (1: each alone); the first
  // waits up to batch_window_ms for the others while other builds are in the compiler. Batches form only
  // when the builds in flight ask for more than 3/4 of batch_cores cores (0: the cores the compiler may
  // run on).
  int64_t batch_max = 4;
  int64_t batch_window_ms = 50;
  int64_t batch_cores = 0;
  int metrics_port = 9472;
};

struct TimingConfig {
  std::string mode = "cold";  // cold | warm
  int64_t min_samples = 10;
  double min_time_s = 0.5;
  double max_noise = 0.005;  // relative noise (CV) to stop at
  double max_time_s = 15;
  int64_t warmup_iters = 3;
  // Screening (0: off): a candidate's first measurement stops as soon as its interval cannot reach this
  // speedup (kiln::eval::TimingOptions::screen_below); confirmations are always measured in full. At most
  // scorer.min_speedup, so nothing that could be promoted is screened out.
  double screen_below = 0;
  // Precision stop (0: off): a case also stops once its speedup's 95 % interval is within +-this of the
  // speedup (kiln::eval::TimingOptions::precision).
  double precision = 0.01;
  // Settling (0: off): untimed calls a short contestant makes before a timed call that follows a much
  // longer one (kiln::eval::TimingOptions::settle_calls).
  int64_t settle_calls = 1;
};

// tester.slots 0 on the cuda backend. On one H200 four slots scored 1376 candidates an hour (one slot, on an
// earlier tree: 371), and in four runs at four slots no promoted kernel's first measurement and
// confirmation disagreed (bench/throughput/README.md).
inline constexpr int64_t kDefaultCudaSlots = 4;

struct TesterConfig {
  std::string backend = "cpu";  // cpu | cuda
  int64_t gpu_index = -1;       // -1: from CUDA_VISIBLE_DEVICES / 0
  std::string gpu_claim_dir;    // with gpu_index -1: claim the first free visible GPU (flock there); "" = off
  double timeout_s = 120;       // per evaluation child
  int64_t cpu_time_limit_s = 300;
  int64_t memory_limit_mb = 8192;
  std::vector<int64_t> pin_cores;  // empty: no pinning
  // Evaluations at once on this tester's GPU (cuda only): they overlap their host-side work and take turns
  // on the device (a timed case holds the device lock alone; kiln/eval/device_lock.h). 0: the backend's
  // default (kDefaultCudaSlots for cuda, 1 for cpu).
  int64_t slots = 0;
  // 1: a campaign's first measurements are screened also against the best of that campaign this tester has
  // measured itself (fresher than the bar a request carries); 0: only the request's and timing.screen_below.
  int64_t screen_by_best = 1;
  TimingConfig timing;
  int metrics_port = 9473;
  // Profiler feedback for correct CUDA candidates: "ncu" (Nsight Compute, when found at `ncu`) or "off".
  std::string profile = "ncu";
  // Which of them: "contenders" (first measurements that can still overtake the campaign's best) or "all".
  std::string profile_scope = "contenders";
  std::string ncu = "/usr/local/cuda/bin/ncu";
  // The Python with torch that runs a task's PyTorch module (reference.py): a path; "" for the first of
  // /usr/bin/python3 and python3 on PATH that imports torch; "off" for none (such tasks are then refused).
  std::string python;
  double profile_timeout_s = 120;
  // Candidates run confined (docs/threat-model.md): as root, slot k's children run as uid and gid
  // sandbox_uid + k; otherwise in a user namespace of the tester's own ids.
  int64_t sandbox_uid = 99000;
  // 1: where confinement cannot be set up, run candidates unconfined anyway, with a warning in every
  // verdict's log. For development only; 0 (the default) refuses to evaluate instead.
  int64_t allow_unconfined = 0;
};

// The MAP-Elites archive (DESIGN §6; defaults after KernelFoundry).
struct ArchiveConfig {
  std::string kind = "map_elites";  // map_elites | elites (a plain top-k list)
  std::vector<std::string> dimensions = {"memory", "compute", "parallelism", "registers", "shared_memory"};
  int64_t islands = 4;
  int64_t migration_interval = 10;  // additions between ring migrations (0 = never)
  double exploration_ratio = 0.2;   // parent: a random cell of the island
  double exploitation_ratio = 0.7;  // parent: the island's best; the rest: a random cell anywhere
  int64_t inspirations = 2;
  int64_t elite_capacity = 16;  // kind "elites" only
};

// Campaign control beyond budget and max_in_flight.
struct CampaignConfig {
  double target_speedup = 0;              // stop proposing once reached (0 = off)
  int64_t patience = 0;                   // stop after this many proposals without a new best (0 = off)
  int64_t prompt_evolution_interval = 5;  // llm campaigns: rewrite the strategy every K proposals (0 = off)
  int64_t tuner_block_sampling = 0;       // tuner campaigns: 1 = block sampling near the best (proposer.h)
  // 1: a candidate's first measurement is screened against the campaign's best (its lowest per-case lower
  // bound): timing stops once the candidate cannot overtake it. 0: only tester.timing.screen_below.
  int64_t screen_by_best = 1;
};

struct ScorerConfig {
  std::string db_path = "archive.db";
  int64_t default_budget = 16;
  int64_t max_in_flight = 4;
  double min_speedup = 1.10;  // promotion threshold (DESIGN §7)
  int metrics_port = 9474;
  ArchiveConfig archive;
  CampaignConfig campaign;
};

struct PromoterConfig {
  std::string registry_dir = "kernel_registry";  // relative to the working directory
  double min_speedup = 1.10;
  int metrics_port = 9475;
};

struct ProposerConfig {
  std::string kind = "tuner";  // tuner | llm
  int64_t slots = 2;
  int metrics_port = 9476;
};

// The OpenAI-compatible Chat Completions client of the llm-bridge. The API key is read from the
// environment variable named by api_key_env, never from this file.
struct LlmConfig {
  std::string base_url = "https://api.openai.com/v1";  // POST {base_url}/chat/completions
  std::string model = "gpt-4o-mini";
  std::map<std::string, double> ensemble;      // model -> weight; empty = `model` alone
  std::string api_key_env = "OPENAI_API_KEY";  // empty or unset variable: no Authorization header
  double temperature = 0.7;
  int64_t max_tokens = 4096;
  double timeout_s = 120;  // per HTTP request
  // All attempts of one request together; keep two of these (a strategy rewrite and the kernel) under
  // broker.lease_timeout_s.propose, or the broker leases the proposal again.
  double total_timeout_s = 140;
  int64_t max_retries = 3;       // after the first try, on 429 / 5xx / timeouts / connection errors
  double backoff_initial_s = 1;  // doubles per retry
  double backoff_max_s = 30;
  std::string gpu_name = "NVIDIA H200";  // CUDA tasks: the GPU the prompt's hardware section describes
};

struct IngestConfig {
  int metrics_port = 9471;
};

struct UpConfig {
  std::string state_dir = ".kiln";
  int64_t compilers = 2;
  int64_t testers = 1;
  std::string log_level = "info";
};

struct KilnConfig {
  BrokerConfig broker;
  IngestConfig ingest;
  ProposerConfig llm_bridge;
  CompilerConfig compiler;
  TesterConfig tester;
  ScorerConfig scorer;
  PromoterConfig promoter;
  LlmConfig llm;
  UpConfig up;
  std::string source;  // where it came from ("defaults", a path)
};

// Parses YAML text (may be empty), applies KILN_* overrides from `env`, validates. Unknown sections or
// keys are errors naming the key path ("scorer.max_in_flgiht: unknown key").
Result<KilnConfig> parse_config(const std::string& yaml_text, const std::string& source_name,
                                const std::map<std::string, std::string>& env);
// Reads the file (an empty path means defaults) and the process environment.
Result<KilnConfig> load_config(const std::string& path);

}  // namespace kiln::config
