// The "compile" service (DESIGN §1, §4): builds a candidate and its task's reference into shared objects
// in a sandbox, caches builds by content, and hands the binaries to the tester, or the build log to the
// scorer when the candidate does not compile. Before any build it accepts the candidate's code against
// the request's task kernel (task::accept_proposal): region bodies are spliced in, a whole file must
// match outside the editable regions; a candidate that fails goes to the scorer as no code. Faults that are
// not the candidate's are never scored (messaging::outcome_for): this worker's (a missing or crashing
// toolchain, no scratch space, a reference build that ran out of time) are given back; permanent ones (a task
// package that does not parse, a reference that does not compile, a request for another backend) are
// dead-lettered at once.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <atomic>
#include <condition_variable>
#include <optional>
#include <string_view>
#include <vector>

#include "kiln/compiler/batch.h"
#include "kiln/compiler/build_log.h"
#include "kiln/compiler/nvcc_graph.h"
#include "kiln/config/config.h"
#include "kiln/core/status.h"
#include "kiln/messaging/handler.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/service/service.h"

namespace kiln::compiler {

namespace detail {
struct BatchScript;
}  // namespace detail

struct CompilerOptions {
  std::string cache_dir = "compile-cache";  // content-addressed build cache
  double timeout_s = 120;                   // per compiler run
  std::string cxx = "g++";
  std::string nvcc = "/usr/local/cuda/bin/nvcc";
  std::string cuda_arch = "sm_90";  // used when a request's arch is empty
  int64_t max_log_bytes = 8192;     // build logs sent on are trimmed to this
  // "graph": nvcc's steps run as a graph (kiln/compiler/nvcc_graph.h), nvcc itself where they cannot be
  // or when one fails; "serial": nvcc runs them, one after another.
  std::string nvcc_mode = "graph";
  // The build tools run with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (and a 64 MiB heap top pad): their heap
  // is backed by transparent huge pages where the kernel allows it (THP "madvise" or "always"). cudafe++
  // and ptxas spend much of their time faulting in small pages; the output is the same byte for byte.
  bool huge_pages = true;
  // CUDA builds leave out the C++17 special math functions where the sources cannot name them
  // (kiln/compiler/lean_headers.h): a fifth less CPU per build, the same device code.
  bool lean_headers = true;
  // One build serves several parameter sets (kiln/compiler/batch.h): CUDA candidates of one source that
  // differ only in their -D values and arrive together (a compiler with several slots) are built as one
  // translation unit of up to batch_max variants. The first of them waits up to batch_window_s for the
  // others (only while other builds are in this compiler). 1: every build alone. Confirmations are always
  // built alone. Batches form only when the builds in flight ask for more than 3/4 of batch_cores cores
  // (batch_share): 0 = the cores this process may run on.
  int64_t batch_max = 1;
  double batch_window_s = 0.05;
  int64_t batch_cores = 0;
};

// compiler.* from the config; a relative cache_dir resolves against `state_dir`.
CompilerOptions options_from_config(const config::CompilerConfig& config, const std::string& state_dir);

// nvcc's -gencode value for a target: "sm_90" -> "arch=compute_90,code=[sm_90,compute_90]" (machine code
// for the target plus its PTX, which the driver can compile for a newer GPU).
std::string cuda_gencode(const std::string& arch);

// The text of kiln/kernel_abi.h, embedded at build time: the compiler needs no source tree at run time.
std::string_view kernel_abi_header();

class CompileHandler {
 public:
  // `metrics` may be null (a private registry is used then).
  static Result<std::unique_ptr<CompileHandler>> create(const CompilerOptions& options,
                                                        std::shared_ptr<prometheus::Registry> metrics);

  // A job with a CompileRequest payload. Thread-safe: each build has its own scratch directory and cache
  // entries are written atomically.
  messaging::JobOutcome handle(const proto::Job& job);
  messaging::JobOutcome compile(const proto::CompileRequest& request);

  // "g++ (Debian 12.2.0-14) 12.2.0" for cpu, nvcc's last version line for cuda; asked once, then cached.
  Result<std::string> toolchain(proto::Backend backend);
  proto::Capabilities capabilities();
  // Where task packages named by blob come from, and where built references are put (default: inline
  // only). Set up before the first job.
  void set_task_source(std::shared_ptr<service::TaskSource> tasks) { tasks_ = std::move(tasks); }

 private:
  CompileHandler(CompilerOptions options, std::shared_ptr<prometheus::Registry> metrics);

  struct Build {
    proto::BuildInfo info;
    std::string so;          // the shared object, when info.ok
    bool timed_out = false;  // the compiler was stopped at the time limit
  };
  // What one build is made of, as its cache key sees it (build.cc).
  struct BuildInputs {
    proto::Backend backend = proto::Backend::kCpu;
    std::string compiler;    // its path
    std::string version;     // its version line
    proto::FileMap sources;  // the package's sources and headers, with the source being built
    std::string source_name;
    std::string source;
    std::map<std::string, std::string> defines;
    std::vector<std::string> base;  // the flags but the -D flags
    std::string flags_text;         // every flag, as the build's record shows them
    std::string files_hash;
    std::string key;  // the cache key: content_key(flags_text)
    // The hash of everything that can change the binary, with `flags_part` for the flags.
    std::string content_key(std::string_view flags_part) const;
  };
  // `may_batch`: the build may be one variant of a batch (a candidate's first build, not a confirmation's).
  Result<Build> build(proto::Backend backend, const std::string& arch, const proto::FileMap& files,
                      const std::string& source_name, const std::string& source,
                      const std::map<std::string, std::string>& defines, bool may_batch = false);
  Result<BuildInputs> build_inputs(proto::Backend backend, const std::string& arch, const proto::FileMap& files,
                                   const std::string& source_name, const std::string& source,
                                   const std::map<std::string, std::string>& defines);
  // The build a compiler run in `dir` made: its record and shared object. A compiler that crashed or wrote
  // nothing is this worker's fault (kUnavailable); a source that does not compile is a build, not ok.
  Result<Build> read_build(const BuildInputs& in, const sandbox::SandboxResult& result, const std::string& dir);

  // The content-addressed cache: a build that was ok, by key (build.cc).
  std::string cache_path(const std::string& key) const;
  std::optional<Build> cached(const std::string& key);
  void keep(const std::string& key, const Build& build);

  // A build waiting to be one variant of a batch; `done` with no `build` means: build it alone.
  struct BatchMember {
    std::map<std::string, std::string> defines;
    bool done = false;
    std::optional<Build> build;
  };
  struct BatchGroup {
    std::vector<BatchMember*> members;
    size_t capacity = 1;  // variants it takes (BatchSizer's when it opened)
  };
  // Joins (or opens and, after the window, builds) the batch of builds that share `group_key`: everything
  // of the cache key but the defines. Empty: build alone (batching.cc).
  std::optional<Build> build_in_batch(const std::string& group_key, const BuildInputs& in);
  // The opener's part: builds the closed batch of `members` (the opener first) and hands each its build.
  std::optional<Build> build_batch_for(const BuildInputs& in, const std::vector<BatchMember*>& members);
  // The batch's one nvcc run and one link per variant; one entry per member, empty where it must be built
  // alone (then all are: the batch failed).
  std::vector<std::optional<Build>> run_batch(const BuildInputs& in,
                                              const std::vector<std::map<std::string, std::string>>& variants);
  // In graph mode, the batch's steps as a graph in `dir` and `script` changed to run them.
  Status graph_batch_script(const BuildInputs& in, const std::string& dir, const std::string& unit_text,
                            detail::BatchScript& script);
  Build batch_variant(const BuildInputs& in, const std::map<std::string, std::string>& defines, std::string so,
                      const std::string& log, const std::string& ptxas, double wall_s);

  // Runs the compiler on `source_name` in `dir`, where the sources are: for CUDA in "graph" mode, nvcc's
  // steps as a graph, and nvcc itself (with the time left) when a step fails, so a failure reads as nvcc
  // reports it. `key` is the build's cache key (names its module) (nvcc_plan.cc).
  Result<sandbox::SandboxResult> run_compiler(proto::Backend backend, const std::string& dir,
                                              const std::string& source_name, const std::vector<std::string>& base,
                                              const std::map<std::string, std::string>& defines,
                                              const std::string& key);
  // nvcc's steps for `flags` (no -D flags) and `source_name`, from one dry run, kept (an error too: those
  // builds are nvcc's own).
  Result<NvccPlan> nvcc_plan(const std::vector<std::string>& flags, const std::string& source_name);
  Result<NvccPlan> plan_by_dry_run(const std::vector<std::string>& flags, const std::string& source_name);

  // The test job of a candidate that built, beside its reference.
  proto::FollowUp test_job(const proto::CompileRequest& request, const proto::Candidate& cand,
                           const service::TaskPackage& package, Build reference, Build kernel);

  CompilerOptions options_;
  std::shared_ptr<service::TaskSource> tasks_ = std::make_shared<service::TaskSource>();
  std::shared_ptr<prometheus::Registry> metrics_;
  prometheus::Counter* cache_hits_ = nullptr;       // kiln_compile_cache_hits_total
  prometheus::Counter* graph_fallbacks_ = nullptr;  // kiln_compile_nvcc_graph_fallbacks_total
  prometheus::Counter* batched_ = nullptr;          // kiln_compile_batched_builds_total
  prometheus::Counter* batch_fallbacks_ = nullptr;  // kiln_compile_batch_fallbacks_total
  std::mutex batch_mu_;
  std::condition_variable batch_cv_;
  BatchSizer sizer_;  // the size of each batch that opens (under batch_mu_)
  std::map<std::string, std::shared_ptr<BatchGroup>> open_batches_;  // group key -> the batch still open
  std::atomic<int> in_flight_{0};  // compile() calls running: a batch waits for others only when there are
  int cores_ = 1;                  // what batch_share divides the builds' demand by
  std::mutex toolchain_mu_;
  std::map<proto::Backend, std::string> toolchains_;  // backend -> version line
  std::mutex plans_mu_;
  std::map<std::string, Result<NvccPlan>> plans_;  // flags and source name -> plan
};

// Handler factory for services/compiler/main.cc: compiler.* from the config, compiler.slots slots.
Result<service::ServiceHandlers> make_compile_handlers(const service::ServiceContext& ctx);

}  // namespace kiln::compiler
