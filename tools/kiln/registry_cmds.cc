// `kiln registry list|show|verify`: read and check kernel_registry/verified_kernels.json.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
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
    std::snprintf(sp, sizeof sp, "%.2fx [%.2f, %.2f]", s, iv.size() == 2 ? iv[0].get<double>() : 0.0,
                  iv.size() == 2 ? iv[1].get<double>() : 0.0);
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
  Status st = reg->verify();
  if (c.json) std::printf("%s\n", nlohmann::json{{"ok", st.is_ok()}, {"error", st.is_ok() ? "" : st.message()}}.dump().c_str());
  if (!st.is_ok()) return fail(dir + ": " + st.message());
  auto entries = reg->list();
  if (!c.json) std::printf("%s: ok (%zu kernel(s), every source present and matching its sha256)\n", dir.c_str(),
                           entries.is_ok() ? entries->size() : 0);
  return 0;
}

}  // namespace kiln::cli
