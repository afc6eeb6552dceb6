// A whole Kiln on loopback for the integration tests: `kiln up` with its own ports, state and registry,
// and the `kiln` command pointed at it.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/files.h"
#include "kiln/messaging/client.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/payloads.h"
#include "process.h"

namespace kiln::testing {

// A whole Kiln on loopback with its own ports, state and registry.
struct LocalKiln {
  TempDir dir{"kiln-it"};
  int broker_port = free_tcp_port();
  int events_port = free_tcp_port();
  int metrics_port = free_tcp_port();
  int scorer_port = free_tcp_port();
  std::string config = dir.path() + "/kiln.yaml";
  std::string registry = dir.path() + "/registry";
  std::unique_ptr<Background> up;

  explicit LocalKiln(int compilers = 2, int testers = 1, double screen_below = 0) {
    std::ofstream(config)
        << "broker:\n"
        << "  bind: tcp://127.0.0.1:" << broker_port << "\n"
        << "  events_bind: tcp://127.0.0.1:" << events_port << "\n"
        << "  metrics_port: " << metrics_port << "\n"
        << "  heartbeat_interval_s: 0.25\n"
        << "  heartbeat_liveness: 4\n"
        << "ingest: {metrics_port: 0}\n"
        << "llm_bridge: {metrics_port: 0}\n"
        << "compiler: {metrics_port: 0}\n"
        << "tester:\n"
        << "  metrics_port: 0\n"
        // Warm and a little longer: these tests check the pipeline and promotion, not cache
        // flushing, and a confident interval must not hinge on one slow generation.
        << "  timing: {mode: warm, min_samples: 10, min_time_s: 0.2, max_time_s: 2.0, warmup_iters: 2,"
        << " screen_below: " << screen_below << "}\n"
        << "scorer: {metrics_port: " << scorer_port << ", max_in_flight: 3}\n"
        << "promoter: {metrics_port: 0, registry_dir: " << registry << "}\n"
        << "up: {compilers: " << compilers << ", testers: " << testers << "}\n";
    up = std::make_unique<Background>(
        std::vector<std::string>{bin_dir() + "/kiln", "--config", config, "up", "--state-dir", dir.path() + "/state"},
        dir.path() + "/up.log");
    zmq::context_t ctx(1);
    messaging::Client client(ctx, endpoint());
    REQUIRE(eventually([&] { return client.request("broker", "status", "", 0.5).is_ok(); }, 30));
  }
  ~LocalKiln() {
    if (up) up->stop(30);
    // A failed REQUIRE unwinds through here: show every service's log, since the failure alone (say, a
    // campaign that did not finish) rarely says which process stalled.
    if (std::uncaught_exceptions() > 0) dump_logs();
  }
  void dump_logs() {
    std::vector<std::filesystem::path> logs{dir.path() + "/up.log"};
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/state/logs", ec)) logs.push_back(e.path());
    for (const auto& path : logs) {
      auto text = read_file(path.string());
      if (!text.is_ok()) continue;
      constexpr size_t kTail = 6000;
      const size_t from = text->size() > kTail ? text->size() - kTail : 0;
      std::fprintf(stderr, "==== %s (last %zu bytes)\n%s\n", path.filename().c_str(), text->size() - from,
                   text->c_str() + from);
    }
  }
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(broker_port); }
  ProcessResult kiln(std::vector<std::string> args, double timeout_s = 300) {
    std::vector<std::string> argv{bin_dir() + "/kiln", "--config", config};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, timeout_s);
  }
  std::string log(const std::string& name) {
    auto r = read_file(dir.path() + "/state/logs/" + name + ".log");
    return r.is_ok() ? *r : "";
  }
};

// The small CPU task the integration campaigns run.
inline std::string fast_task() { return source_dir() + "/tests/data/tasks/fast_cpu"; }

// The broker's status, or an empty one when it does not answer.
inline proto::BrokerStatus broker_status(messaging::Client& c) {
  auto body = c.request("broker", "status", "", 2.0);
  if (!body.is_ok()) return {};
  auto st = proto::decode<proto::BrokerStatus>(*body);
  return st.is_ok() ? *st : proto::BrokerStatus{};
}

}  // namespace kiln::testing
