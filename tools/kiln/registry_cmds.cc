// `kiln registry list|show|verify|match`: read, check and query kernel_registry/verified_kernels.json.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kiln/registry/match.h"
#include "kiln/registry/registry.h"

namespace kiln::cli {

int cmd_registry_list(const Common& c, const std::string& dir) {
  auto reg = registry::Registry::open(dir);
  if (!reg.is_ok()) return fail(reg.status().message());
  auto entries = reg->list();
  if (!entries.is_ok()) return fail(entries.status().message());
  if (c.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : *entries) out.push_back(registry::to_json(e));
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (entries->empty()) {
    std::printf("no verified kernels in %s/verified_kernels.json yet\n", dir.c_str());
    return 0;
  }
  std::printf("%-48s %-10s %-16s %-8s %-20s %s\n", "kernel_id", "op", "target", "dtype", "speedup [95% CI]", "created");
  for (const auto& e : *entries) {
    nlohmann::json j = registry::to_json(e);
    char sp[64];
    double s = j["benchmark"].value("speedup", 0.0);
    auto iv = j.value("speedup_interval", nlohmann::json::array({0.0, 0.0}));
    double lo = iv.size() == 2 ? iv[0].get<double>() : 0.0, hi = iv.size() == 2 ? iv[1].get<double>() : 0.0;
    if (hi > 0)
      std::snprintf(sp, sizeof sp, "%.2fx [%.2f, %.2f]", s, lo, hi);
    else
      std::snprintf(sp, sizeof sp, "%.2fx", s);  // an entry without an interval (Forge's)
    std::printf("%-48s %-10s %-16s %-8s %-20s %s\n", j.value("kernel_id", "").c_str(), j.value("op", "").c_str(),
                j.value("target_gpu", "").substr(0, 16).c_str(), j.value("dtype", "").c_str(), sp,
                j.value("created_at", "").c_str());
  }
  return 0;
}

int cmd_registry_show(const Common&, const std::string& dir, const std::string& id) {
  auto reg = registry::Registry::open(dir);
  if (!reg.is_ok()) return fail(reg.status().message());
  auto e = reg->show(id);
  if (!e.is_ok()) return fail(e.status().message());
  std::printf("%s\n", registry::to_json(*e).dump(2).c_str());
  return 0;
}

int cmd_registry_verify(const Common& c, const std::string& dir) {
  auto reg = registry::Registry::open(dir);
  if (!reg.is_ok()) return fail(reg.status().message());
  std::vector<std::string> warnings;
  Status st = reg->verify(&warnings);
  if (c.json)
    std::printf("%s\n",
                nlohmann::json{{"ok", st.is_ok()}, {"error", st.is_ok() ? "" : st.message()}, {"warnings", warnings}}
                    .dump()
                    .c_str());
  else
    for (const std::string& w : warnings) std::fprintf(stderr, "kiln: warning: %s\n", w.c_str());
  if (!st.is_ok()) return fail(dir + ": " + st.message());
  auto entries = reg->list();
  size_t n = entries.is_ok() ? entries->size() : 0;
  if (!c.json) {
    if (warnings.empty())
      std::printf("%s: ok (%zu kernel(s), every source present and matching its sha256)\n", dir.c_str(), n);
    else
      std::printf("%s: ok with %zu warning(s) (%zu kernel(s), every source present; %zu without source_sha256)\n",
                  dir.c_str(), warnings.size(), n, warnings.size());
  }
  return 0;
}

int cmd_registry_match(const Common& c, const std::string& dir, const MatchOptions& o) {
  if (o.gpu_given && o.gpu.empty()) return fail("--gpu: expected a GPU name, got an empty string");
  registry::MatchQuery query{o.op, o.dtype, o.gpu, {}};
  std::string shape_error;
  if (!registry::parse_shape(o.shape, query.shape, shape_error)) return fail("--shape: " + shape_error);

  auto reg = registry::Registry::open(dir);
  if (!reg.is_ok()) return fail(reg.status().message());
  auto raw = reg->raw_entries();  // every entry already checked by the registry's strict reader
  if (!raw.is_ok()) return fail(dir + ": " + raw.status().message());
  registry::MatchOutcome outcome =
      raw->empty()
          ? registry::MatchOutcome{std::nullopt, "no " + o.op + " " + o.dtype + " kernel: " + dir + "/" +
                                                     std::string(registry::kRegistryFile) + " has no kernels yet"}
          : registry::match_kernel(*raw, query);
  if (!outcome.match) {
    if (c.json) std::printf("%s\n", nlohmann::json{{"match", nullptr}, {"error", outcome.error}}.dump().c_str());
    return fail(outcome.error);
  }
  const registry::Match& m = *outcome.match;
  const nlohmann::json& entry = (*raw)[m.index];
  registry::MatchCandidate k;
  std::string read_error;
  if (!registry::read_candidate(entry, k, read_error))
    return fail("kernels[" + std::to_string(m.index) + "]." + read_error);
  if (c.json) {
    nlohmann::json out{{"entry", entry},
                       {"match",
                        {{"gpu_tier", registry::gpu_tier_name(m.gpu_tier)},
                         {"shape_distance", m.shape_distance},
                         {"reason", m.reason},
                         {"source_verified", k.source_verified}}}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  // The source path as the entry stores it: relative to the registry folder for Kiln's own entries.
  std::printf("%s\n", k.kernel_id.c_str());
  std::printf("  source   %s\n", k.source_path.c_str());
  std::printf("  speedup  %.2fx on %s (%s%s)\n", k.speedup, (k.gpu_name.empty() ? k.target_gpu : k.gpu_name).c_str(),
              k.evidence_level.c_str(), k.source_verified ? "" : "; no source_sha256");
  std::printf("  why      %s\n", m.reason.c_str());
  return 0;
}

}  // namespace kiln::cli
