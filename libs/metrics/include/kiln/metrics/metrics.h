// Prometheus metrics (DESIGN §8): a registry per process and a /metrics endpoint in text format 0.0.4.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::metrics {

// Serves GET /metrics for one registry on 0.0.0.0:<port> from a background thread; port 0 picks a free
// port. Every series carries the node label of node_from_env(), read once at start. Stops on destruction.
// A page served beside /metrics: GET on a path matching `pattern` (a regular expression over the whole
// path) answers render(the pattern's capture groups). A not_found error is a 404, any other a 500, each
// with the error's line as text.
struct Page {
  std::string pattern;
  std::string content_type = "text/html; charset=utf-8";
  std::function<Result<std::string>(const std::vector<std::string>& captures)> render;
};

class MetricsServer {
 public:
  static Result<std::unique_ptr<MetricsServer>> start(std::shared_ptr<prometheus::Registry> registry,
                                                      const std::string& host, int port,
                                                      const std::vector<Page>& pages = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const;

 private:
  MetricsServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The node a process runs on (docs/cluster.md): KILN_NODE, set by the Swarm stack to the node's host name.
// When set, every series the process exposes carries the label node="<name>"; unset, none does.
inline constexpr const char* kNodeEnv = "KILN_NODE";
inline constexpr size_t kMaxNodeLength = 253;  // a DNS name's

// `value` as a node name: 1 to kMaxNodeLength characters of [A-Za-z0-9._-]; anything else is an
// invalid_argument naming the fault.
Result<std::string> valid_node(std::string_view value);

// KILN_NODE's value: empty when unset or empty; an invalid value is logged (one warning) and ignored.
std::string node_from_env();

// The text exposition of a registry (what /metrics returns); with a node, every sample carries
// node="<node>" (a metric with a node label of its own keeps it).
std::string render(prometheus::Registry& registry, const std::string& node = "");
inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// Bucket boundaries in seconds for job durations: 1 ms .. ~10 min.
prometheus::Histogram::BucketBoundaries duration_buckets_s();

}  // namespace kiln::metrics
