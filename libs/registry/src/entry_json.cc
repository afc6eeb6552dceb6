// The registry's entries as JSON: read with errors that name the key path, written back in the same shape.
#include "kiln/registry/registry.h"

#include <string>
#include <utility>
#include <vector>

namespace kiln::registry {

using nlohmann::json;

namespace {

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
      e.verification.tested_shapes.push_back(
          get_string((*shapes)[i], "verification.tested_shapes[" + std::to_string(i) + "]"));
  }

  Obj bench = o.req_obj("benchmark");
  e.benchmark.passed = bench.req_bool("passed");
  e.benchmark.baseline_latency_us = bench.req_number("baseline_latency_us");
  e.benchmark.candidate_latency_us = bench.req_number("candidate_latency_us");
  e.benchmark.speedup = bench.req_number("speedup");
  e.benchmark.warmup_iters = bench.req_int("warmup_iters");
  e.benchmark.benchmark_iters = bench.req_int("benchmark_iters");
  e.benchmark.gpu_name = bench.req_string("gpu_name");

  e.evidence_level = o.req_string("evidence_level");  // any level loads; verify() warns about unknown ones
  e.created_at = o.req_string("created_at");
  // Forge's entries carry no source hash; they load, marked, and verify() says what is missing.
  e.source_sha256 = o.opt_string("source_sha256");
  e.has_source_sha256 = !e.source_sha256.empty();
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
  if (const json* baselines = o.opt("baselines")) {
    if (!baselines->is_array()) fail("baselines", "expected a list");
    for (size_t i = 0; i < baselines->size(); ++i) {
      const std::string at = "baselines[" + std::to_string(i) + "]";
      if (!(*baselines)[i].is_object()) fail(at, "expected an object");
      Obj b{(*baselines)[i], at};
      BaselineBenchmark bb;
      bb.name = b.req_string("name");
      bb.latency_us = b.req_number("latency_us");
      bb.speedup = b.req_number("speedup");
      std::tie(bb.speedup_lo, bb.speedup_hi) = interval_from(b, at);
      e.baselines.push_back(std::move(bb));
    }
  }
  if (const json* evidence = o.opt("evidence")) evidence_from(*evidence, e);
  return e;
}

}  // namespace

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
  for (const BaselineBenchmark& b : e.baselines) {
    j["baselines"].push_back({{"name", b.name},
                              {"latency_us", b.latency_us},
                              {"speedup", b.speedup},
                              {"speedup_interval", json::array({b.speedup_lo, b.speedup_hi})}});
  }
  return j;
}

Result<KernelEntry> from_json(const json& j) {
  try {
    return entry_from(j);
  } catch (const JsonError& e) {
    return invalid_argument(e.message);
  }
}

}  // namespace kiln::registry
