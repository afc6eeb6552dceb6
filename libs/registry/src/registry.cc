#include "kiln/registry/registry.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/core/time.h"

namespace kiln::registry {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kLockFile = ".lock";
constexpr std::string_view kKernelsDir = "kernels";
constexpr size_t kMaxRegistryBytes = 256u << 20;

// ------------------------------------------------------------------------------ JSON reading

// Shape errors travel as this exception inside this file only; from_json turns it into a Status.
struct JsonError {
  std::string message;
};

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw JsonError{path + ": " + what}; }

const json& field(const json& obj, const std::string& path, const char* key) {
  if (!obj.is_object()) fail(path, "expected an object");
  auto it = obj.find(key);
  if (it == obj.end()) fail(path.empty() ? key : path + "." + key, "missing (required)");
  return *it;
}

const json* optional_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string join_path(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }

std::string get_string(const json& v, const std::string& path) {
  if (!v.is_string()) fail(path, "expected a string");
  return v.get<std::string>();
}
double get_number(const json& v, const std::string& path) {
  if (!v.is_number()) fail(path, "expected a number");
  return v.get<double>();
}
int64_t get_int(const json& v, const std::string& path) {
  if (!v.is_number_integer()) fail(path, "expected an integer");
  return v.get<int64_t>();
}
bool get_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) fail(path, "expected true or false");
  return v.get<bool>();
}

// Readers for required (req_*) and optional (opt_*) keys of an object at `path`.
struct Obj {
  const json& j;
  std::string path;
  std::string req_string(const char* k) const { return get_string(field(j, path, k), join_path(path, k)); }
  double req_number(const char* k) const { return get_number(field(j, path, k), join_path(path, k)); }
  int64_t req_int(const char* k) const { return get_int(field(j, path, k), join_path(path, k)); }
  bool req_bool(const char* k) const { return get_bool(field(j, path, k), join_path(path, k)); }
  Obj req_obj(const char* k) const {
    const json& v = field(j, path, k);
    if (!v.is_object()) fail(join_path(path, k), "expected an object");
    return Obj{v, join_path(path, k)};
  }
  std::string opt_string(const char* k) const {
    const json* v = optional_field(j, k);
    return v ? get_string(*v, join_path(path, k)) : std::string();
  }
  double opt_number(const char* k) const {
    const json* v = optional_field(j, k);
    return v ? get_number(*v, join_path(path, k)) : 0.0;
  }
  int64_t opt_int(const char* k) const {
    const json* v = optional_field(j, k);
    return v ? get_int(*v, join_path(path, k)) : 0;
  }
  const json* opt(const char* k) const { return optional_field(j, k); }
};

SampleStats stats_from(const json* v, const std::string& path) {
  SampleStats s;
  if (v == nullptr) return s;
  if (!v->is_object()) fail(path, "expected an object");
  Obj o{*v, path};
  s.n = o.opt_int("n");
  s.median_us = o.opt_number("median_us");
  s.p10_us = o.opt_number("p10_us");
  s.p90_us = o.opt_number("p90_us");
  s.cv = o.opt_number("cv");
  return s;
}

json stats_to(const SampleStats& s) {
  return json{{"n", s.n}, {"median_us", s.median_us}, {"p10_us", s.p10_us}, {"p90_us", s.p90_us}, {"cv", s.cv}};
}

json cases_to(const std::vector<CaseBenchmark>& cases) {
  json out = json::array();
  for (const CaseBenchmark& c : cases)
    out.push_back({{"dims", c.dims},
                   {"speedup", c.speedup},
                   {"speedup_interval", json::array({c.speedup_lo, c.speedup_hi})},
                   {"baseline_latency_us", c.baseline_latency_us},
                   {"candidate_latency_us", c.candidate_latency_us},
                   {"benchmark_iters", c.benchmark_iters}});
  return out;
}

json measurements_to(const std::vector<Measurement>& ms, const MergedEvidence& merged) {
  json list = json::array();
  for (const Measurement& m : ms)
    list.push_back({{"purpose", m.purpose},
                    {"worker_id", m.worker_id},
                    {"host", m.host},
                    {"device", m.device},
                    {"gpu_uuid", m.gpu_uuid},
                    {"speedup", m.speedup},
                    {"speedup_interval", json::array({m.speedup_lo, m.speedup_hi})},
                    {"cases", m.cases},
                    {"benchmark_iters", m.benchmark_iters}});
  return {{"measurements", std::move(list)},
          {"merged",
           {{"speedup", merged.speedup},
            {"speedup_interval", json::array({merged.speedup_lo, merged.speedup_hi})},
            {"testers", merged.testers},
            {"devices", merged.devices},
            {"note", merged.note}}}};
}

// An optional "speedup_interval": [lo, hi] of the object at `at` ("" for the entry itself); {0, 0} when absent.
std::pair<double, double> interval_from(const Obj& o, const std::string& at) {
  const json* interval = o.opt("speedup_interval");
  if (interval == nullptr) return {0, 0};
  const std::string path = at.empty() ? "speedup_interval" : at + ".speedup_interval";
  if (!interval->is_array() || interval->size() != 2) fail(path, "expected [lo, hi]");
  return {get_number((*interval)[0], path + "[0]"), get_number((*interval)[1], path + "[1]")};
}

void evidence_from(const json& v, KernelEntry& e) {
  if (!v.is_object()) fail("evidence", "expected an object");
  Obj ev{v, "evidence"};
  const json& list = field(v, "evidence", "measurements");
  if (!list.is_array()) fail("evidence.measurements", "expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = "evidence.measurements[" + std::to_string(i) + "]";
    if (!list[i].is_object()) fail(at, "expected an object");
    Obj m{list[i], at};
    Measurement out;
    out.purpose = m.req_string("purpose");
    out.worker_id = m.req_string("worker_id");
    out.host = m.opt_string("host");
    out.device = m.opt_string("device");
    out.gpu_uuid = m.opt_string("gpu_uuid");
    out.speedup = m.req_number("speedup");
    std::tie(out.speedup_lo, out.speedup_hi) = interval_from(m, at);
    out.cases = m.opt_int("cases");
    out.benchmark_iters = m.opt_int("benchmark_iters");
    e.measurements.push_back(std::move(out));
  }
  Obj merged = ev.req_obj("merged");
  e.merged.speedup = merged.req_number("speedup");
  std::tie(e.merged.speedup_lo, e.merged.speedup_hi) = interval_from(merged, "evidence.merged");
  e.merged.testers = merged.req_int("testers");
  e.merged.devices = merged.req_int("devices");
  e.merged.note = merged.opt_string("note");
}

KernelEntry entry_from(const json& j) {
  if (!j.is_object()) fail("entry", "expected an object");
  Obj o{j, ""};
  KernelEntry e;
  e.kernel_id = o.req_string("kernel_id");
  e.op = o.req_string("op");
  e.language = o.req_string("language");
  e.source_path = o.req_string("source_path");
  e.target_gpu = o.req_string("target_gpu");
  e.dtype = o.req_string("dtype");
  Obj shape = o.req_obj("shape");
  for (const auto& [k, v] : shape.j.items()) e.shape[k] = get_int(v, "shape." + k);

  Obj ver = o.req_obj("verification");
  e.verification.passed = ver.req_bool("passed");
  e.verification.max_abs_error = ver.opt_number("max_abs_error");
  e.verification.max_rel_error = ver.opt_number("max_rel_error");
  Obj tol = ver.req_obj("tolerance");
  e.verification.tolerance.rtol = tol.req_number("rtol");
  e.verification.tolerance.atol = tol.req_number("atol");
  if (const json* shapes = ver.opt("tested_shapes")) {
    if (!shapes->is_array()) fail("verification.tested_shapes", "expected a list");
    for (size_t i = 0; i < shapes->size(); ++i)
      e.verification.tested_shapes.push_back(get_string((*shapes)[i], "verification.tested_shapes[" + std::to_string(i) + "]"));
  }

  Obj bench = o.req_obj("benchmark");
  e.benchmark.passed = bench.req_bool("passed");
  e.benchmark.baseline_latency_us = bench.req_number("baseline_latency_us");
  e.benchmark.candidate_latency_us = bench.req_number("candidate_latency_us");
  e.benchmark.speedup = bench.req_number("speedup");
  e.benchmark.warmup_iters = bench.req_int("warmup_iters");
  e.benchmark.benchmark_iters = bench.req_int("benchmark_iters");
  e.benchmark.gpu_name = bench.req_string("gpu_name");

  e.evidence_level = o.req_string("evidence_level");
  if (std::string why = evidence_level_error(e.evidence_level); !why.empty()) fail("evidence_level", why);
  e.created_at = o.req_string("created_at");
  // Forge's entries carry no source hash; they load, marked, and verify() says what is missing.
  e.source_sha256 = o.opt_string("source_sha256");
  e.source_verified = !e.source_sha256.empty();
  e.task_name = o.opt_string("task_name");
  e.campaign_id = o.opt_string("campaign_id");
  e.program_id = o.opt_string("program_id");
  e.toolchain = o.opt_string("toolchain");
  e.driver_version = o.opt_string("driver_version");
  if (const json* timing = o.opt("timing")) {
    if (!timing->is_object()) fail("timing", "expected an object");
    Obj t{*timing, "timing"};
    e.timing_method = t.opt_string("method");
    e.timing_mode = t.opt_string("mode");
    e.candidate_stats = stats_from(t.opt("candidate"), "timing.candidate");
    e.reference_stats = stats_from(t.opt("reference"), "timing.reference");
  }
  std::tie(e.speedup_lo, e.speedup_hi) = interval_from(o, "");
  if (const json* params = o.opt("params")) {
    if (!params->is_object()) fail("params", "expected an object");
    for (const auto& [k, v] : params->items()) e.params[k] = get_string(v, "params." + k);
  }
  if (const json* cases = o.opt("cases")) {
    if (!cases->is_array()) fail("cases", "expected a list");
    for (size_t i = 0; i < cases->size(); ++i) {
      const std::string at = "cases[" + std::to_string(i) + "]";
      if (!(*cases)[i].is_object()) fail(at, "expected an object");
      Obj c{(*cases)[i], at};
      CaseBenchmark cb;
      for (const auto& [k, v] : c.req_obj("dims").j.items()) cb.dims[k] = get_int(v, at + ".dims." + k);
      cb.speedup = c.req_number("speedup");
      std::tie(cb.speedup_lo, cb.speedup_hi) = interval_from(c, at);
      cb.baseline_latency_us = c.opt_number("baseline_latency_us");
      cb.candidate_latency_us = c.opt_number("candidate_latency_us");
      cb.benchmark_iters = c.opt_int("benchmark_iters");
      e.cases.push_back(std::move(cb));
    }
  }
  if (const json* evidence = o.opt("evidence")) evidence_from(*evidence, e);
  return e;
}

// The registry file as stored: entries kept as raw JSON so a rewrite preserves keys this version does
// not know, plus their parsed form for the checks.
struct Loaded {
  json raw = json::array();
  std::vector<KernelEntry> entries;
};

Result<Loaded> load(const std::string& dir) {
  std::string path = dir + "/" + std::string(kRegistryFile);
  Loaded out;
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path, kMaxRegistryBytes));
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string file(kRegistryFile);
  if (doc.is_discarded()) return internal_error(file + ": not valid JSON");
  if (!doc.is_object() || !doc.contains("kernels") || !doc["kernels"].is_array())
    return internal_error(file + ": expected {\"kernels\": [...]}");
  out.raw = doc["kernels"];
  for (size_t i = 0; i < out.raw.size(); ++i) {
    try {
      out.entries.push_back(entry_from(out.raw[i]));
    } catch (const JsonError& e) {
      return internal_error(file + ": kernels[" + std::to_string(i) + "]." + e.message);
    }
  }
  return out;
}

// ------------------------------------------------------------------------------ promotion

// An exclusive flock held for the life of the object: the registry has a single writer at a time,
// across threads (each opens its own description) and processes.
class FileLock {
 public:
  static Result<FileLock> acquire(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return unavailable(path + ": cannot open lock file: " + std::strerror(errno));
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return unavailable(path + ": cannot lock: " + std::strerror(e));
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  FileLock(const FileLock&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
  }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

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

Status check_request(const proto::PromoteRequest& r) {
  if (r.backend != "cuda" && r.backend != "cpu")
    return invalid_argument("backend must be cuda or cpu, got \"" + r.backend + "\"");
  if (!is_lower_name(r.op)) return invalid_argument("op must match [a-z0-9_]+, got \"" + r.op + "\"");
  if (!is_lower_name(r.dtype)) return invalid_argument("dtype must match [a-z0-9_]+, got \"" + r.dtype + "\"");
  std::string expected_ext = r.backend == "cuda" ? "cu" : "cpp";
  if (!r.source_ext.empty() && r.source_ext != expected_ext)
    return invalid_argument("source_ext must be " + expected_ext + " for backend " + r.backend + ", got \"" +
                            r.source_ext + "\"");
  if (r.worker.device_name.empty()) return invalid_argument("worker.device_name is empty: the target is unknown");
  return Status::ok();
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

// Speedups summarized: their geometric mean, the lowest lower and the highest upper interval bound.
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

// One measurement from the cases it timed (the single case when the request predates per-case lists).
Measurement measurement_of(std::string_view purpose, const proto::WorkerInfo& w, const proto::CaseTiming& first,
                           const std::vector<proto::CaseTiming>& all) {
  const std::vector<proto::CaseTiming>& cases = all.empty() ? std::vector<proto::CaseTiming>{first} : all;
  Measurement m;
  m.purpose = std::string(purpose);
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
  for (const proto::CaseTiming& t : r.confirmation_cases.empty() ? std::vector<proto::CaseTiming>{c} : r.confirmation_cases)
    e.cases.push_back({t.dims, t.speedup, t.speedup_lo, t.speedup_hi, t.reference.median_us, t.candidate.median_us,
                       t.candidate.n});
  e.measurements.push_back(measurement_of("eval", r.worker, r.benchmark, r.benchmark_cases));
  e.measurements.push_back(measurement_of("confirm", confirm, r.confirmation, r.confirmation_cases));
  e.merged = merge_measurements(e.measurements);
  return e;
}

// A source path stored in the registry must stay inside it.
bool is_safe_relative(const std::string& p) {
  if (p.empty() || p.front() == '/') return false;
  for (const auto& part : fs::path(p))
    if (part == "..") return false;
  return true;
}

}  // namespace

// ------------------------------------------------------------------------------ public API

json to_json(const KernelEntry& e) {
  json j{
      {"kernel_id", e.kernel_id},
      {"op", e.op},
      {"language", e.language},
      {"source_path", e.source_path},
      {"target_gpu", e.target_gpu},
      {"dtype", e.dtype},
      {"shape", e.shape},
      {"verification",
       {{"passed", e.verification.passed},
        {"max_abs_error", e.verification.max_abs_error},
        {"max_rel_error", e.verification.max_rel_error},
        {"tolerance", {{"rtol", e.verification.tolerance.rtol}, {"atol", e.verification.tolerance.atol}}},
        {"tested_shapes", e.verification.tested_shapes}}},
      {"benchmark",
       {{"passed", e.benchmark.passed},
        {"baseline_latency_us", e.benchmark.baseline_latency_us},
        {"candidate_latency_us", e.benchmark.candidate_latency_us},
        {"speedup", e.benchmark.speedup},
        {"warmup_iters", e.benchmark.warmup_iters},
        {"benchmark_iters", e.benchmark.benchmark_iters},
        {"gpu_name", e.benchmark.gpu_name}}},
      {"evidence_level", e.evidence_level},
      {"created_at", e.created_at},
      {"task_name", e.task_name},
      {"campaign_id", e.campaign_id},
      {"program_id", e.program_id},
      {"toolchain", e.toolchain},
      {"driver_version", e.driver_version},
      {"timing",
       {{"method", e.timing_method},
        {"mode", e.timing_mode},
        {"candidate", stats_to(e.candidate_stats)},
        {"reference", stats_to(e.reference_stats)}}},
      {"speedup_interval", json::array({e.speedup_lo, e.speedup_hi})},
      {"params", e.params},
  };
  if (!e.source_sha256.empty()) j["source_sha256"] = e.source_sha256;
  if (!e.cases.empty()) j["cases"] = cases_to(e.cases);  // none for entries from before per-case numbers
  if (!e.measurements.empty()) j["evidence"] = measurements_to(e.measurements, e.merged);
  return j;
}

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
    out.note = "one device: one tester on one device made all " + n + " measurements (no other tester of that device model was connected)";
  else if (out.devices == 1)
    out.note = "one device: " + std::to_string(out.testers) + " testers shared one device for all " + n + " measurements";
  return out;
}

Result<KernelEntry> from_json(const json& j) {
  try {
    return entry_from(j);
  } catch (const JsonError& e) {
    return invalid_argument(e.message);
  }
}

std::string shape_slug(const std::map<std::string, int64_t>& shape) {
  static const std::map<std::string, std::string> kPrefixes{
      {"hidden_size", "h"}, {"batch", "b"}, {"seq_len", "s"}, {"heads", "n"}};
  std::map<std::string, int64_t> lowered;
  for (const auto& [k, v] : shape) {
    std::string l;
    for (char c : k) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    lowered[l] = v;
  }
  std::string out;
  for (const auto& [k, v] : lowered) {
    auto known = kPrefixes.find(k);
    std::string prefix;
    if (known != kPrefixes.end()) {
      prefix = known->second;
    } else {
      for (char c : k)
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) prefix.push_back(c);
    }
    if (!out.empty()) out.push_back('_');
    out += prefix + std::to_string(v);
  }
  return out.empty() ? "noshape" : out;
}

std::string kernel_id(std::string_view language, std::string_view op, std::string_view gpu, std::string_view dtype,
                      const std::map<std::string, int64_t>& shape, const std::set<std::string>& existing) {
  std::string base = std::string(language) + "_" + std::string(op) + "_" + gpu_slug(gpu) + "_" + std::string(dtype) +
                     "_" + shape_slug(shape) + "_v";
  for (int64_t n = 1;; ++n) {
    std::string id = base + std::to_string(n);
    if (!existing.count(id)) return id;
  }
}

bool is_refusal(const Status& status) {
  auto code = status.code();
  return code == StatusCode::kFailedPrecondition || code == StatusCode::kAlreadyExists ||
         code == StatusCode::kInvalidArgument;
}

Result<Registry> Registry::open(const std::string& dir) {
  if (dir.empty()) return invalid_argument("registry: empty directory name");
  std::error_code ec;
  fs::path abs = fs::absolute(dir, ec);
  if (ec) return invalid_argument(dir + ": " + ec.message());
  if (fs::exists(abs, ec) && !fs::is_directory(abs, ec)) return invalid_argument(dir + ": not a directory");
  return Registry(abs.lexically_normal().string());
}

Result<std::vector<KernelEntry>> Registry::list() const {
  KILN_ASSIGN_OR_RETURN(Loaded loaded, load(dir_));
  return std::move(loaded.entries);
}

Result<json> Registry::raw_entries() const {
  KILN_ASSIGN_OR_RETURN(Loaded loaded, load(dir_));
  return std::move(loaded.raw);
}

Result<KernelEntry> Registry::show(const std::string& id) const {
  KILN_ASSIGN_OR_RETURN(std::vector<KernelEntry> entries, list());
  for (auto& e : entries)
    if (e.kernel_id == id) return std::move(e);
  return not_found("no kernel " + id + " in " + dir_);
}

Status Registry::verify(std::vector<std::string>* warnings) const {
  KILN_ASSIGN_OR_RETURN(std::vector<KernelEntry> entries, list());
  std::vector<std::string> problems;
  std::set<std::string> ids;
  for (const KernelEntry& e : entries) {
    auto problem = [&](const std::string& what) { problems.push_back(e.kernel_id + ": " + what); };
    if (!ids.insert(e.kernel_id).second) problem("duplicate kernel id");
    std::string prefix = e.language + "_" + e.op + "_" + gpu_slug(e.target_gpu) + "_" + e.dtype + "_" +
                         shape_slug(e.shape) + "_v";
    std::string_view version = std::string_view(e.kernel_id).substr(std::min(prefix.size(), e.kernel_id.size()));
    bool version_ok = !version.empty() && std::all_of(version.begin(), version.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (!e.kernel_id.starts_with(prefix) || !version_ok) problem("id does not match its fields (expected " + prefix + "<n>)");
    // Kiln writes cuda and cpp; Forge's entries are triton.
    if (e.language != "cuda" && e.language != "cpp" && e.language != "triton")
      problem("language must be cuda, cpp or triton");
    if (!e.verification.passed) problem("verification.passed is false");
    if (!e.benchmark.passed) problem("benchmark.passed is false");
    if (!e.source_verified && warnings)
      warnings->push_back(e.kernel_id + ": no source_sha256: " + e.source_path +
                          " cannot be checked against the kernel that was measured (ranked below hashed entries)");
    if (!is_safe_relative(e.source_path)) {
      problem("source_path must be relative and inside the registry");
      continue;
    }
    auto source = read_file(dir_ + "/" + e.source_path);
    if (!source.is_ok()) {
      problem("source " + e.source_path + " is missing");
      continue;
    }
    if (!e.source_verified) continue;  // warned about above
    if (sha256_hex(*source) != e.source_sha256) problem("source " + e.source_path + " does not match source_sha256");
  }
  if (problems.empty()) return Status::ok();
  std::string msg = std::to_string(problems.size()) + " problem(s): ";
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  return failed_precondition(msg);
}

std::string effective_source(const proto::PromoteRequest& r) {
  if (r.params.empty()) return r.source;
  // A templated kernel is its source plus the -D defines it was built with; the copy in the registry
  // must build the verified kernel by itself, and two parameter sets are two different kernels.
  std::string out = "// Built and verified by Kiln with these template parameters (-D defines):\n";
  for (const auto& [k, v] : r.params) out += "#define " + k + " " + v + "\n";
  return out + r.source;
}

Result<std::string> Registry::promote(const proto::PromoteRequest& r, double min_speedup) const {
  KILN_RETURN_IF_ERROR(check_request(r));
  KILN_RETURN_IF_ERROR(check_rules(r, min_speedup));
  const std::string language = r.backend == "cuda" ? "cuda" : "cpp";
  const std::string ext = r.backend == "cuda" ? "cu" : "cpp";
  const std::string source = effective_source(r);
  const std::string sha = sha256_hex(source);
  const std::map<std::string, int64_t>& shape = r.shape.empty() ? r.confirmation.dims : r.shape;

  KILN_RETURN_IF_ERROR(make_dirs(dir_));
  KILN_ASSIGN_OR_RETURN(FileLock lock, FileLock::acquire(dir_ + "/" + std::string(kLockFile)));
  KILN_ASSIGN_OR_RETURN(Loaded loaded, load(dir_));
  std::set<std::string> ids;
  for (const KernelEntry& e : loaded.entries) {
    if (e.source_sha256 == sha && e.target_gpu == r.worker.device_name && e.shape == shape)
      return Status(StatusCode::kAlreadyExists, "duplicate of " + e.kernel_id);
    ids.insert(e.kernel_id);
  }
  const std::string id = kernel_id(language, r.op, r.worker.device_name, r.dtype, shape, ids);
  const std::string rel = std::string(kKernelsDir) + "/" + language + "/" + r.op + "/" + id + "." + ext;
  const std::string source_path = dir_ + "/" + rel;

  // The source lands first, so the JSON never names a file that is not there.
  KILN_RETURN_IF_ERROR(make_dirs(fs::path(source_path).parent_path().string()));
  KILN_RETURN_IF_ERROR(write_file_atomic(source_path, source));
  loaded.raw.push_back(to_json(entry_for(r, id, language, rel, sha)));
  json doc{{"kernels", loaded.raw}};
  Status written = write_file_atomic(dir_ + "/" + std::string(kRegistryFile), doc.dump(2) + "\n");
  if (!written.is_ok()) {
    std::error_code ec;
    fs::remove(source_path, ec);
    return written;
  }
  return id;
}

}  // namespace kiln::registry
