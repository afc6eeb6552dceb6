// Profiler feedback: Nsight Compute (ncu) run over a profiling run of the evaluation child
// (kiln-eval-cuda --profile), after the verdict and apart from the timing. The tester builds the command
// line here and reads ncu's CSV back into a few numbers and one line a proposer can act on. Needs no CUDA
// header: the tester builds it on any host.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::cuda {

// Keys of a profile (TestReport.profile): "kernels" (launches seen), "duration_us" (their sum);
// duration-weighted means over the kernels of "occupancy_pct" (achieved), "dram_pct" and "sm_pct"
// (throughput, % of peak), "l1_hit_pct", "l2_hit_pct"; the largest "registers_per_thread" and
// "shared_bytes_per_block"; "limiter" (0 latency, 1 memory, 2 compute); the tester adds "profile_s" (what
// profiling cost).
struct Profile {
  std::map<std::string, double> metrics;
  std::string summary;  // one line: "1 kernel, 120.3 us: dram 81 %, sm 12 % of peak; ...: memory bound"
};

// A kernel's throughput counts as a bound from this share of its peak on; below it on both, the kernel is
// latency bound (too little parallelism or occupancy to fill the device).
inline constexpr double kBoundPct = 60;

// The ncu command line that profiles `eval_argv` (a kiln-eval-cuda --profile run) and writes the CSV to
// `csv_path`: every process (the candidate runs in a forked runner), raw metrics, at most `max_kernels`
// launches.
std::vector<std::string> ncu_argv(const std::string& ncu, const std::string& csv_path, int max_kernels,
                                  const std::vector<std::string>& eval_argv);

// Reads `ncu --csv --page raw` output: ncu's own "==PROF==" lines, a header row, a units row, one row per
// kernel launch. Keeps the rows of process `pid` (every row when pid <= 0). Not found: no kernel row.
Result<Profile> parse_ncu_csv(std::string_view csv, int64_t pid);

// Why an ncu run failed, in ncu's own words: its "==ERROR==" lines (at most three, without the prefix,
// joined by "; ", capped at 400 bytes), or "" when it printed none.
std::string ncu_errors(std::string_view output);

// Whether an ncu failure is worth one more try: anything but a refusal that will not change (no access to
// the performance counters, no ncu, a target it cannot run).
bool ncu_failure_is_transient(std::string_view output);

}  // namespace kiln::cuda
