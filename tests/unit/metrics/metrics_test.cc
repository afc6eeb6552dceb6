#include <httplib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/core/files.h"
#include "kiln/metrics/metrics.h"
#include "kiln/testing/skip.h"

namespace {

std::shared_ptr<prometheus::Registry> sample_registry() {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& promotions = prometheus::BuildCounter()
                         .Name("kiln_promotions_total")
                         .Help("Promotion decisions by outcome.")
                         .Register(*registry);
  promotions.Add({{"outcome", "promoted"}}).Increment(3);
  auto& durations = prometheus::BuildHistogram()
                        .Name("kiln_job_duration_seconds")
                        .Help("Time from lease to result.")
                        .Register(*registry);
  durations.Add({{"service", "compile"}}, kiln::metrics::duration_buckets_s()).Observe(0.42);
  prometheus::BuildGauge()
      .Name("kiln_queue_depth_jobs")
      .Help("Jobs waiting.")
      .Register(*registry)
      .Add({{"service", "test.cpu"}})
      .Set(2);
  return registry;
}

}  // namespace

TEST_CASE("/metrics serves the registry in text format 0.0.4", "[metrics]") {
  auto server = kiln::metrics::MetricsServer::start(sample_registry(), "127.0.0.1", 0);
  REQUIRE(server.is_ok());
  int port = (*server)->port();
  REQUIRE(port > 0);

  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/metrics");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == kiln::metrics::kContentType);
  CHECK(res->body.find("kiln_promotions_total{outcome=\"promoted\"} 3") != std::string::npos);
  CHECK(res->body.find("kiln_job_duration_seconds_bucket{service=\"compile\",le=\"0.5\"} 1") != std::string::npos);
  CHECK(res->body.find("kiln_queue_depth_jobs{service=\"test.cpu\"} 2") != std::string::npos);
  auto missing = client.Get("/nothing");
  REQUIRE(missing);
  CHECK(missing->status == 404);

  // A second server cannot take the same port: start() says so instead of failing later.
  auto clash = kiln::metrics::MetricsServer::start(sample_registry(), "127.0.0.1", port);
  REQUIRE_FALSE(clash.is_ok());
  CHECK(clash.status().message().find(std::to_string(port)) != std::string::npos);
}

TEST_CASE("the server stops in its destructor and frees the port", "[metrics]") {
  int port = 0;
  {
    auto server = kiln::metrics::MetricsServer::start(sample_registry(), "127.0.0.1", 0);
    REQUIRE(server.is_ok());
    port = (*server)->port();
  }
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  CHECK_FALSE(client.Get("/metrics"));
  auto again = kiln::metrics::MetricsServer::start(sample_registry(), "127.0.0.1", port);
  CHECK(again.is_ok());
}

TEST_CASE("duration buckets span 1 ms to 10 min in increasing order", "[metrics]") {
  auto b = kiln::metrics::duration_buckets_s();
  REQUIRE(b.size() > 5);
  CHECK(b.front() == Approx(0.001));
  CHECK(b.back() == Approx(600));
  for (size_t i = 1; i < b.size(); ++i) CHECK(b[i] > b[i - 1]);
}

TEST_CASE("promtool accepts the exposition", "[metrics]") {
  const char* promtool = "/usr/bin/promtool";
  if (::access(promtool, X_OK) != 0) KILN_SKIP("promtool not installed (Debian's prometheus package has it)");
  auto registry = sample_registry();
  kiln::TempDir dir;
  std::string path = dir.path() + "/metrics.txt";
  for (std::string node : {"", "swarm-node-1"}) {  // without and with the node label
    REQUIRE(kiln::write_file_atomic(path, kiln::metrics::render(*registry, node)).is_ok());
    std::string cmd = std::string(promtool) + " check metrics < " + path + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int rc = ::pclose(p);
    INFO(node << ": " << out);
    CHECK(rc == 0);
  }
}

TEST_CASE("pages beside /metrics answer their captures, 404 for not_found and 500 for other errors", "[metrics]") {
  kiln::metrics::Page page;
  page.pattern = R"(/campaigns/([a-z0-9-]+)/report)";
  page.render = [](const std::vector<std::string>& captures) -> kiln::Result<std::string> {
    if (captures.at(0) == "gone") return kiln::not_found("unknown campaign 'gone'");
    if (captures.at(0) == "broken") return kiln::internal_error("database is locked");
    return "<p>" + captures.at(0) + "</p>";
  };
  auto server = kiln::metrics::MetricsServer::start(sample_registry(), "127.0.0.1", 0, {page});
  REQUIRE(server.is_ok());
  httplib::Client client("127.0.0.1", (*server)->port());
  auto ok = client.Get("/campaigns/c-1/report");
  REQUIRE(ok);
  CHECK(ok->status == 200);
  CHECK(ok->body == "<p>c-1</p>");
  CHECK(ok->get_header_value("Content-Type") == "text/html; charset=utf-8");
  auto gone = client.Get("/campaigns/gone/report");
  REQUIRE(gone);
  CHECK(gone->status == 404);
  CHECK(gone->body == "unknown campaign 'gone'\n");
  auto broken = client.Get("/campaigns/broken/report");
  REQUIRE(broken);
  CHECK(broken->status == 500);
  auto outside = client.Get("/campaigns/c-1/report/extra");  // the pattern covers the whole path
  REQUIRE(outside);
  CHECK(outside->status == 404);
  auto metrics = client.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
}

namespace {

// The sample lines of an exposition (not the # HELP and # TYPE lines).
std::vector<std::string> samples(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line[0] != '#') out.push_back(line);
    start = end + 1;
  }
  return out;
}

// Sets KILN_NODE (or unsets it, for nullptr) for one scope.
class NodeEnv {
 public:
  explicit NodeEnv(const char* value) {
    if (value)
      ::setenv(kiln::metrics::kNodeEnv, value, 1);
    else
      ::unsetenv(kiln::metrics::kNodeEnv);
  }
  ~NodeEnv() { ::unsetenv(kiln::metrics::kNodeEnv); }
  NodeEnv(const NodeEnv&) = delete;
  NodeEnv& operator=(const NodeEnv&) = delete;
};

std::string scrape(const char* node_env) {
  NodeEnv env(node_env);
  auto server = kiln::metrics::MetricsServer::start(sample_registry(), "127.0.0.1", 0);
  REQUIRE(server.is_ok());
  httplib::Client client("127.0.0.1", (*server)->port());
  auto res = client.Get("/metrics");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  return res->body;
}

}  // namespace

TEST_CASE("with a node, every sample carries node=\"<name>\"", "[metrics][node]") {
  auto registry = sample_registry();
  prometheus::BuildGauge()
      .Name("kiln_own_node")
      .Help("A metric naming a node itself.")
      .Register(*registry)
      .Add({{"node", "other"}})
      .Set(1);
  std::string text = kiln::metrics::render(*registry, "worker-2.example");
  auto lines = samples(text);
  REQUIRE(lines.size() > 20);  // the histogram's buckets, sum and count among them
  for (const std::string& line : lines) {
    INFO(line);
    if (line.rfind("kiln_own_node", 0) == 0) {
      CHECK(line == "kiln_own_node{node=\"other\"} 1");  // its own label kept, not doubled
    } else {
      CHECK(line.find("node=\"worker-2.example\"") != std::string::npos);
    }
  }
  CHECK(text.find("kiln_promotions_total{outcome=\"promoted\",node=\"worker-2.example\"} 3") != std::string::npos);
  CHECK(text.find("kiln_job_duration_seconds_bucket{service=\"compile\",node=\"worker-2.example\",le=\"0.5\"} 1") !=
        std::string::npos);
}

TEST_CASE("without a node, no sample carries a node label", "[metrics][node]") {
  std::string text = kiln::metrics::render(*sample_registry());
  REQUIRE_FALSE(samples(text).empty());
  CHECK(text.find("node=") == std::string::npos);
  CHECK(text == kiln::metrics::render(*sample_registry(), ""));
}

TEST_CASE("node names are host names: bounded, letters, digits, '.', '_' and '-'", "[metrics][node]") {
  using kiln::metrics::valid_node;
  for (const char* ok : {"n1", "worker-3.example.org", "GPU_node-07", "a"}) {
    INFO(ok);
    auto v = valid_node(ok);
    REQUIRE(v.is_ok());
    CHECK(*v == ok);
  }
  CHECK(valid_node(std::string(kiln::metrics::kMaxNodeLength, 'a')).is_ok());
  auto too_long = valid_node(std::string(kiln::metrics::kMaxNodeLength + 1, 'a'));
  REQUIRE_FALSE(too_long.is_ok());
  CHECK(too_long.status().message().find("254 characters") != std::string::npos);
  CHECK_FALSE(valid_node("").is_ok());
  for (std::string bad : {"two words", "quote\"d", "new\nline", "brace}", "tab\t", "caf\xc3\xa9", "a/b", "x=y"}) {
    INFO(bad);
    auto v = valid_node(bad);
    REQUIRE_FALSE(v.is_ok());
    CHECK(v.status().code() == kiln::StatusCode::kInvalidArgument);
    CHECK(v.status().message().find("KILN_NODE") != std::string::npos);
  }
  CHECK(valid_node("new\nline").status().message().find("byte 0x0a at offset 3") != std::string::npos);
  CHECK(valid_node("a/b").status().message().find("'/' at offset 1") != std::string::npos);
}

TEST_CASE("/metrics labels every sample with KILN_NODE, and with none when it is unset or invalid", "[metrics][node]") {
  std::string labelled = scrape("swarm-node-1");
  for (const std::string& line : samples(labelled)) {
    INFO(line);
    CHECK(line.find("node=\"swarm-node-1\"") != std::string::npos);
  }
  CHECK(scrape(nullptr).find("node=") == std::string::npos);
  CHECK(scrape("").find("node=") == std::string::npos);
  // An invalid name is logged and ignored: the server still starts and serves, without the label.
  std::string refused = scrape("bad node\"}");
  CHECK(refused.find("kiln_promotions_total{outcome=\"promoted\"} 3") != std::string::npos);
  CHECK(refused.find("node=") == std::string::npos);
}
