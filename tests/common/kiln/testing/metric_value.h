// Reads one series of a prometheus registry, for tests.
#pragma once

#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <map>
#include <optional>
#include <string>

namespace kiln::testing {

inline std::optional<double> metric_value(prometheus::Registry& registry, const std::string& name,
                                          const std::map<std::string, std::string>& labels = {}) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      std::map<std::string, std::string> have;
      for (const auto& l : m.label) have[l.name] = l.value;
      if (have != labels) continue;
      if (family.type == prometheus::MetricType::Counter) return m.counter.value;
      if (family.type == prometheus::MetricType::Gauge) return m.gauge.value;
    }
  }
  return std::nullopt;
}

}  // namespace kiln::testing
