// How a tester is set up (tester.* in the config): its backend and evaluation child, the limits and
// confinement of every child, the timing options it passes on, and profiling.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/core/status.h"
#include "kiln/proto/ids.h"

namespace kiln::tester {

struct TesterOptions {
  proto::Backend backend = proto::Backend::kCpu;  // the service is "test.<backend>"
  std::string eval_binary;    // kiln-eval (cpu) or kiln-eval-cuda (cuda); empty: the one beside this executable
  int64_t gpu_index = -1;     // cuda: NVML index; -1: from CUDA_VISIBLE_DEVICES, else 0
  std::string gpu_claim_dir;  // cuda, gpu_index -1: claim the first free visible GPU there (gpu_claim.h)
  double timeout_s = 120;     // per evaluation child
  int64_t cpu_time_limit_s = 300;
  int64_t memory_limit_mb =
      8192;  // address-space limit of the child (cpu backend; CUDA reserves more address space than any sane limit)
  std::vector<int64_t> pin_cores;  // cores the child may use; empty: all
  // Screens a campaign's first measurements also against the best of that campaign this tester has
  // measured itself (SeenBars): fresher than the bar the request carries, which is the campaign's best when
  // the candidate was proposed (often nothing yet, for the first wave of a campaign).
  bool screen_by_best = true;
  // Evaluations at once (cuda): with more than one, the children share the device's lock file in
  // `lock_dir` (kiln/eval/device_lock.h), created there when missing.
  int64_t slots = 1;
  std::string lock_dir;
  config::TimingConfig timing;
  size_t max_log_bytes = 16384;  // of the child's output kept in the report
  std::string worker_id;
  // Without confinement (tester.allow_unconfined where it cannot be set up, or `confine` false), the
  // sandbox's opt-in defences for the evaluation child; unset: the backend's default (cpu: read-only root;
  // cuda: writable root; process creation is refused inside kiln-eval's runners either way).
  std::optional<bool> readonly_root;
  std::optional<bool> deny_process_creation;
  // false: skip the confinement (the sandbox's older opt-in defences above apply), as tests of those do.
  bool confine = true;
  // Profiler feedback (cuda): after a correct verdict, a separate run of the evaluation child under ncu.
  std::string profile = "ncu";  // ncu | off
  // Which correct candidates: "contenders" (first measurements whose proposer reads profiles and whose
  // interval reaches the campaign's bar on every case; see why_not_profiled) or "all".
  std::string profile_scope = "contenders";
  std::string ncu = "/usr/local/cuda/bin/ncu";
  double profile_timeout_s = 120;
  // Confinement of every evaluation child (confinement.h): as root, slot k's child runs as sandbox_uid + k.
  uint32_t sandbox_uid = 99000;
  // Paths the child must not see (kiln_private_paths).
  std::vector<std::string> hidden_paths;
  // Where confinement cannot be set up: false refuses to evaluate (the job goes back with the reason);
  // true runs candidates unconfined, saying so in every verdict's log. For development only.
  bool allow_unconfined = false;
  // tester.python as configured, and the interpreter with torch found from it when the tester starts
  // (torch_python.h); empty `python`: tasks with a PyTorch module are refused here, and go to another tester.
  std::string python_config;
  std::string python;
  std::string python_missing;  // why there is none
  std::string python_torch_version;
};

// tester.* from the config. Fails for a backend other than cpu or cuda.
Result<TesterOptions> options_from_config(const config::TesterConfig& config);

// The evaluation child for `backend` (kiln-eval, or kiln-eval-cuda for cuda) in the directory of the
// running executable (/proc/self/exe).
Result<std::string> default_eval_binary(proto::Backend backend = proto::Backend::kCpu);

}  // namespace kiln::tester
