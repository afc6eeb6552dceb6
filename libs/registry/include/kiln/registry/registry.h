// The verified-kernel registry (DESIGN §7): kernel_registry/verified_kernels.json plus the promoted
// sources under kernels/<language>/<op>/. Forge's entry fields plus Kiln's evidence (source hash,
// campaign and program, toolchain, timing statistics, speedup interval). One writer at a time, under an
// exclusive flock on <dir>/.lock; readers need no lock because the JSON is replaced atomically.
//
// Entries written by Forge load too: they lack source_sha256 (has_source_sha256 is then false: nothing ties
// their file to the measured kernel), their language may be triton, and they may carry keys Kiln does not
// know (skill_ids), which stay in the file. The planner that picks an entry for an op, dtype, GPU and shape
// is in match.h; it recommends only what verify() accepts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"
#include "kiln/registry/vocabulary.h"  // gpu_slug, the evidence levels

namespace kiln::registry {

inline constexpr std::string_view kRegistryFile = "verified_kernels.json";
// Forge's promotion bar: no promotion is made with a lower one, however the promoter is configured.
inline constexpr double kMinPromotionSpeedup = 1.10;

struct Tolerance {
  double rtol = 0;
  double atol = 0;
};

struct Verification {
  bool passed = false;
  double max_abs_error = 0;
  double max_rel_error = 0;
  Tolerance tolerance;
  std::vector<std::string> tested_shapes;  // "B=16,H=4097"
};

// Forge's benchmark block. Kiln fills it from the confirming measurement.
struct Benchmark {
  bool passed = false;
  double baseline_latency_us = 0;   // reference median
  double candidate_latency_us = 0;  // candidate median
  double speedup = 0;
  int64_t warmup_iters = 0;
  int64_t benchmark_iters = 0;  // samples taken (n)
  std::string gpu_name;
};

struct SampleStats {
  int64_t n = 0;
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double cv = 0;
};

// One benchmark case of the confirming measurement (Kiln's extra): every case of the task cleared the
// promotion bar in both measurements; Forge's `shape` and `benchmark` describe the first.
struct CaseBenchmark {
  std::map<std::string, int64_t> dims;
  double speedup = 0;
  double speedup_lo = 0;  // 95 % interval
  double speedup_hi = 0;
  double baseline_latency_us = 0;   // reference median
  double candidate_latency_us = 0;  // candidate median
  int64_t benchmark_iters = 0;      // samples taken (n)
};

// What users run, timed beside the kernel in the confirming measurement of the first benchmark case (Kiln's
// extra "baselines"): PyTorch eager or torch.compile (the task's reference.py), cuBLAS. Forge's
// baseline_latency_us and speedup stay the task's reference's (for a task whose reference is a PyTorch module,
// that is PyTorch eager already).
struct BaselineBenchmark {
  std::string name;  // torch_eager | torch_compile | cublas_sgemm ...
  double latency_us = 0;
  double speedup = 0;  // baseline median / candidate median
  double speedup_lo = 0;
  double speedup_hi = 0;
};

// One tester's measurement of the promoted kernel (Kiln's extra, the seed's results_per_gpu): the first
// measurement ("eval") and the independent confirmation ("confirm"), each with the worker and device that
// made it. A measurement's numbers summarise every benchmark case it timed.
struct Measurement {
  std::string purpose;  // eval | confirm
  std::string worker_id;
  std::string host;
  std::string device;     // device model (the CPU model for the CPU backend)
  std::string gpu_uuid;   // empty on the CPU backend
  double speedup = 0;     // geometric mean of the cases' speedups
  double speedup_lo = 0;  // the lowest lower bound of the cases' 95 % intervals
  double speedup_hi = 0;  // the highest upper bound
  int64_t cases = 0;
  int64_t benchmark_iters = 0;  // samples of the candidate, summed over the cases
};

// The measurements merged (the seed's TestResult.merge): the geometric mean of their speedups, the
// lowest lower and highest upper bound of any of them (every measurement cleared the bar, so the merged
// lower bound did too), and how many testers and distinct devices (GPU uuid, else host and model) they
// came from. `note` says so when one device made every measurement: its speedup was then never seen on a
// second device.
struct MergedEvidence {
  double speedup = 0;
  double speedup_lo = 0;
  double speedup_hi = 0;
  int64_t testers = 0;
  int64_t devices = 0;
  std::string note;
};

// Speedups summarized the way every Kiln summary does: their geometric mean, the lowest lower and the
// highest upper interval bound (a measurement over its cases, the merge over measurements, a report cell).
struct SpeedupSpan {
  double log_sum = 0;
  double lo = 0;
  double hi = 0;
  size_t n = 0;
  void add(double speedup, double speedup_lo, double speedup_hi) {
    log_sum += std::log(speedup);
    lo = n == 0 ? speedup_lo : std::min(lo, speedup_lo);
    hi = n == 0 ? speedup_hi : std::max(hi, speedup_hi);
    ++n;
  }
  double geomean() const { return std::exp(log_sum / static_cast<double>(n)); }
};

// Merges measurements by the rules above; an empty list gives all zeros and no note.
MergedEvidence merge_measurements(const std::vector<Measurement>& measurements);

struct KernelEntry {
  // Forge's fields.
  std::string kernel_id;
  std::string op;
  std::string language;     // cuda | cpp
  std::string source_path;  // relative to the registry directory: kernels/<language>/<op>/<id>.<ext>
  std::string target_gpu;   // exact model name (the CPU model for the CPU backend)
  std::string dtype;
  std::map<std::string, int64_t> shape;  // the benchmark case's dims
  Verification verification;
  Benchmark benchmark;
  // op_level, runtime_level or endpoint_level (match.h); Kiln itself writes op_level only.
  std::string evidence_level = std::string(kEvidenceOpLevel);
  std::string created_at;  // ISO-8601 UTC
  // Kiln's extras.
  std::string source_sha256;
  // In memory only: whether the entry carries source_sha256. Kiln always writes one; Forge's entries
  // have none, so nothing ties their source file to the kernel that was measured (lower evidence). Whether
  // the file matches the hash is verify()'s question (and the planner's: match_entry.h check_source()).
  bool has_source_sha256 = true;
  std::string task_name;
  std::string campaign_id;
  std::string program_id;
  std::string toolchain;
  std::string driver_version;
  std::string timing_method;  // host_clock | cuda_events
  std::string timing_mode;    // cold | warm
  SampleStats candidate_stats;
  SampleStats reference_stats;
  double speedup_lo = 0;  // 95 % interval of the confirming measurement
  double speedup_hi = 0;
  std::map<std::string, std::string> params;
  std::vector<CaseBenchmark> cases;          // every benchmark case, in task order ("cases"; absent in older entries)
  std::vector<BaselineBenchmark> baselines;  // "baselines"; absent where none was timed
  // "evidence": {"measurements": [...], "merged": {...}}; absent in Forge's and older entries.
  std::vector<Measurement> measurements;
  MergedEvidence merged;
};

// source_sha256 is left out when the entry has none (a Forge entry), rather than written empty.
nlohmann::json to_json(const KernelEntry& entry);
// Strict: every Forge field must be present with the right type; errors name the key. source_sha256 may be
// missing (has_source_sha256 is then false), and evidence_level may be a level this version does not know
// (Forge adds levels without a schema change): it loads, verify() warns, and the planner skips the entry.
Result<KernelEntry> from_json(const nlohmann::json& j);
// {B:16, H:4096} -> "b16_h4096"; keys lowercased and sorted; hidden_size->h, batch->b, seq_len->s,
// heads->n, other keys with '_' removed; empty -> "noshape".
std::string shape_slug(const std::map<std::string, int64_t>& shape);
// <language>_<op>_<gpu_slug>_<dtype>_<shape_slug>_v<n>, with n the smallest from 1 not in `existing`.
std::string kernel_id(std::string_view language, std::string_view op, std::string_view gpu, std::string_view dtype,
                      const std::map<std::string, int64_t>& shape, const std::set<std::string>& existing);

// The source the registry keeps for a request: the kernel file with its template parameters baked in
// as #define lines (the file as is when there are none). source_sha256 is the hash of this text.
std::string effective_source(const proto::PromoteRequest& r);

// The source with comments removed and whitespace normalized: a run of whitespace (or a comment) becomes
// one space where it separates two word characters or two operator characters ("+ +"), nothing elsewhere,
// and a newline where it ends a preprocessor line. String and character literals are kept as written. The
// promoter treats two sources with the same normal form as the same kernel.
std::string normalized_source(std::string_view source);

class Registry {
 public:
  // Opens (does not create) a registry directory; a missing directory is an empty registry until the
  // first promotion creates it.
  static Result<Registry> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  Result<std::vector<KernelEntry>> list() const;
  // The "kernels" array as stored (keys this version does not know included), once every entry has
  // passed from_json: what match_kernel() reads and `kiln registry match --json` prints.
  Result<nlohmann::json> raw_entries() const;
  Result<KernelEntry> show(const std::string& kernel_id) const;
  // Every entry well-formed, ids unique and matching their fields, source present with its sha256.
  // An entry without source_sha256 (Forge's) is a warning, not a failure: it is well-formed by Forge's
  // schema and its source is still checked for presence, but its hash cannot be; one line per such
  // entry, naming the field, goes to `warnings` when given. So does an unknown evidence level.
  Status verify(std::vector<std::string>* warnings = nullptr) const;

  // Checks the promotion rules of DESIGN §7 and, when they hold, copies the source (never executing it)
  // and adds the entry. Returns the new kernel id. A refusal is kFailedPrecondition with the reason
  // ("speedup interval lower bound 1.04 < 1.10", "not measurably faster than <id> ...", a bar under
  // kMinPromotionSpeedup), kAlreadyExists for "duplicate of <id>: ..." (the same source up to comments and
  // whitespace: promotion.h check_not_a_copy), or kInvalidArgument for a malformed request; I/O trouble is
  // kUnavailable (worth a retry).
  Result<std::string> promote(const proto::PromoteRequest& request, double min_speedup) const;

 private:
  explicit Registry(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// Whether a promote() error is a refusal (the job is done) rather than a failure to do the work.
bool is_refusal(const Status& status);

}  // namespace kiln::registry
