#include "promotion.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string_view>
#include <vector>

#include "kiln/core/time.h"
#include "kiln/proto/ids.h"

namespace kiln::registry {
namespace {

// "1.04" for messages; more digits when two-decimal rounding would make a refused value look equal.
std::string fmt(double v, double other) {
  char a[32], b[32];
  std::snprintf(a, sizeof a, "%.2f", v);
  std::snprintf(b, sizeof b, "%.2f", other);
  if (std::strcmp(a, b) == 0) std::snprintf(a, sizeof a, "%.4f", v);
  return a;
}

bool is_lower_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

Status check_timing(const proto::CaseTiming& t, const std::string& what, double min_speedup) {
  if (!(t.speedup >= min_speedup))
    return failed_precondition(what + "speedup " + fmt(t.speedup, min_speedup) + " < " + fmt(min_speedup, t.speedup));
  if (!(t.speedup_lo >= min_speedup))
    return failed_precondition(what + "speedup interval lower bound " + fmt(t.speedup_lo, min_speedup) + " < " +
                               fmt(min_speedup, t.speedup_lo));
  return Status::ok();
}

// Every benchmark case of a measurement clears the bar (the scorer's rule, archive/scoring.h: a kernel
// measurably slower at one of its task's shapes is not verified faster). "case B=16,H=4096: ".
Status check_cases(const std::vector<proto::CaseTiming>& cases, const std::string& what, double min_speedup) {
  for (const proto::CaseTiming& c : cases) {
    std::string dims;
    for (const auto& [k, v] : c.dims) dims += (dims.empty() ? "" : ",") + k + "=" + std::to_string(v);
    if (dims.empty()) dims = "default";
    if (c.candidate.n <= 0 || c.reference.n <= 0)
      return failed_precondition(what + "case " + dims + " was not measured");
    KILN_RETURN_IF_ERROR(check_timing(c, what + "case " + dims + ": ", min_speedup));
  }
  return Status::ok();
}

// The rules of DESIGN §7, in the order a reader would check them.
// One measurement from the cases it timed (the single case when the request predates per-case lists).
Measurement measurement_of(proto::Purpose purpose, const proto::WorkerInfo& w, const proto::CaseTiming& first,
                           const std::vector<proto::CaseTiming>& all) {
  const std::vector<proto::CaseTiming>& cases = all.empty() ? std::vector<proto::CaseTiming>{first} : all;
  Measurement m;
  m.purpose = std::string(proto::name(purpose));
  m.worker_id = w.worker_id;
  m.host = w.host;
  m.device = w.device_name;
  m.gpu_uuid = w.gpu_uuid;
  SpeedupSpan span;
  for (const proto::CaseTiming& c : cases) {
    span.add(c.speedup, c.speedup_lo, c.speedup_hi);
    m.benchmark_iters += c.candidate.n;
  }
  m.speedup = span.geomean();
  m.speedup_lo = span.lo;
  m.speedup_hi = span.hi;
  m.cases = static_cast<int64_t>(cases.size());
  return m;
}

}  // namespace

namespace detail {

Status check_request(const proto::PromoteRequest& r) {
  if (!is_lower_name(r.op)) return invalid_argument("op must match [a-z0-9_]+, got \"" + r.op + "\"");
  if (!is_lower_name(r.dtype)) return invalid_argument("dtype must match [a-z0-9_]+, got \"" + r.dtype + "\"");
  const std::string expected_ext(proto::source_extension(r.backend));
  if (!r.source_ext.empty() && r.source_ext != expected_ext)
    return invalid_argument("source_ext must be " + expected_ext + " for backend " +
                            std::string(proto::name(r.backend)) + ", got \"" + r.source_ext + "\"");
  if (r.worker.device_name.empty()) return invalid_argument("worker.device_name is empty: the target is unknown");
  return Status::ok();
}

Status check_rules(const proto::PromoteRequest& r, double min_speedup) {
  if (r.source.empty()) return failed_precondition("source is missing");
  if (!r.verification.passed) return failed_precondition("verification did not pass");
  if (r.benchmark.candidate.n <= 0 || r.benchmark.reference.n <= 0)
    return failed_precondition("benchmark did not pass: candidate and reference were not both measured");
  KILN_RETURN_IF_ERROR(check_timing(r.benchmark, "", min_speedup));
  KILN_RETURN_IF_ERROR(check_cases(r.benchmark_cases, "", min_speedup));
  if (r.confirmation.candidate.n <= 0 || r.confirmation.reference.n <= 0)
    return failed_precondition("no confirming measurement by a second, independent test job");
  if (!r.confirm_worker.device_name.empty() && r.confirm_worker.device_name != r.worker.device_name)
    return failed_precondition("confirmation ran on \"" + r.confirm_worker.device_name + "\", not on the target \"" +
                               r.worker.device_name + "\"");
  KILN_RETURN_IF_ERROR(check_timing(r.confirmation, "confirmation ", min_speedup));
  return check_cases(r.confirmation_cases, "confirmation ", min_speedup);
}

KernelEntry entry_for(const proto::PromoteRequest& r, const std::string& id, const std::string& language,
                      const std::string& source_path, const std::string& sha) {
  const proto::CaseTiming& c = r.confirmation;
  const proto::WorkerInfo& confirm = r.confirm_worker.device_name.empty() ? r.worker : r.confirm_worker;
  KernelEntry e;
  e.kernel_id = id;
  e.op = r.op;
  e.language = language;
  e.source_path = source_path;
  e.target_gpu = r.worker.device_name;
  e.dtype = r.dtype;
  e.shape = r.shape.empty() ? c.dims : r.shape;
  e.verification.passed = r.verification.passed;
  e.verification.max_abs_error = r.verification.max_abs_error;
  e.verification.max_rel_error = r.verification.max_rel_error;
  e.verification.tolerance = {r.verification.rtol, r.verification.atol};
  e.verification.tested_shapes = r.verification.tested_shapes;
  e.benchmark.passed = true;
  e.benchmark.baseline_latency_us = c.reference.median_us;
  e.benchmark.candidate_latency_us = c.candidate.median_us;
  e.benchmark.speedup = c.speedup;
  e.benchmark.warmup_iters = c.warmup_iters;
  e.benchmark.benchmark_iters = c.candidate.n;
  e.benchmark.gpu_name = confirm.device_name;
  for (const proto::BaselineTiming& b : c.baselines)
    e.baselines.push_back({b.name, b.stats.median_us, b.speedup, b.speedup_lo, b.speedup_hi});
  // Kiln times the op alone against its reference; it never integrates a kernel into a runtime or a
  // serving stack, so op_level is all it can claim.
  e.evidence_level = std::string(kEvidenceOpLevel);
  e.created_at = iso8601_utc(wall_time_s());
  e.source_sha256 = sha;
  e.task_name = r.task_name;
  e.campaign_id = r.campaign_id;
  e.program_id = r.program_id;
  e.toolchain = r.build.toolchain;
  e.driver_version = confirm.driver_version.empty() ? r.worker.driver_version : confirm.driver_version;
  e.timing_method = r.timing_method;
  e.timing_mode = r.timing_mode;
  e.candidate_stats = {c.candidate.n, c.candidate.median_us, c.candidate.p10_us, c.candidate.p90_us, c.candidate.cv};
  e.reference_stats = {c.reference.n, c.reference.median_us, c.reference.p10_us, c.reference.p90_us, c.reference.cv};
  e.speedup_lo = c.speedup_lo;
  e.speedup_hi = c.speedup_hi;
  e.params = r.params;
  for (const proto::CaseTiming& t :
       r.confirmation_cases.empty() ? std::vector<proto::CaseTiming>{c} : r.confirmation_cases)
    e.cases.push_back(
        {t.dims, t.speedup, t.speedup_lo, t.speedup_hi, t.reference.median_us, t.candidate.median_us, t.candidate.n});
  e.measurements.push_back(measurement_of(proto::Purpose::kEval, r.worker, r.benchmark, r.benchmark_cases));
  e.measurements.push_back(measurement_of(proto::Purpose::kConfirm, confirm, r.confirmation, r.confirmation_cases));
  e.merged = merge_measurements(e.measurements);
  return e;
}

}  // namespace detail

MergedEvidence merge_measurements(const std::vector<Measurement>& measurements) {
  MergedEvidence out;
  if (measurements.empty()) return out;
  std::set<std::string> testers;
  std::set<std::string> devices;
  SpeedupSpan span;
  for (const Measurement& m : measurements) {
    span.add(m.speedup, m.speedup_lo, m.speedup_hi);
    testers.insert(m.worker_id);
    devices.insert(m.gpu_uuid.empty() ? m.host + "/" + m.device : m.gpu_uuid);
  }
  out.speedup = span.geomean();
  out.speedup_lo = span.lo;
  out.speedup_hi = span.hi;
  out.testers = static_cast<int64_t>(testers.size());
  out.devices = static_cast<int64_t>(devices.size());
  const std::string n = std::to_string(measurements.size());
  if (out.devices == 1 && out.testers == 1)
    out.note = "one device: one tester on one device made all " + n +
               " measurements (no other tester of that device model was connected)";
  else if (out.devices == 1)
    out.note =
        "one device: " + std::to_string(out.testers) + " testers shared one device for all " + n + " measurements";
  return out;
}

std::string effective_source(const proto::PromoteRequest& r) {
  if (r.params.empty()) return r.source;
  // A templated kernel is its source plus the -D defines it was built with; the copy in the registry
  // must build the verified kernel by itself, and two parameter sets are two different kernels.
  std::string out = "// Built and verified by Kiln with these template parameters (-D defines):\n";
  for (const auto& [k, v] : r.params) out += "#define " + k + " " + v + "\n";
  return out + r.source;
}

bool is_refusal(const Status& status) {
  auto code = status.code();
  return code == StatusCode::kFailedPrecondition || code == StatusCode::kAlreadyExists ||
         code == StatusCode::kInvalidArgument;
}

}  // namespace kiln::registry
