#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "campaign_views.h"
#include "commands.h"
#include "kiln/core/files.h"
#include "kiln/core/signals.h"
#include "kiln/messaging/client.h"
#include "kiln/proto/ids.h"
#include "kiln/task/task.h"
#include "ports.h"
#include "supervisor.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

std::string self_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

// The demo's registry: the configured one, unless that is the built-in default (a folder of the source
// checkout, whose files git tracks), in which case one under the state dir.
std::string demo_registry_dir(const config::KilnConfig& cfg, const std::string& state) {
  if (cfg.promoter.registry_dir != config::KilnConfig{}.promoter.registry_dir) return cfg.promoter.registry_dir;
  return state + "/registry";
}

// The results table, a report per campaign and where the registry is; `rc` is the wait's exit code, and
// the demo's unless a campaign ended with programs not evaluated.
int show_demo_results(const Common& c, const std::vector<std::string>& ids, const std::string& state, int rc) {
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  auto mine = fetch_campaigns(client, ids);
  if (!mine.is_ok()) return fail(mine.status().message());
  print_results_table(*mine);
  // One report per campaign, next to the state it was read from.
  const std::string reports = state + "/reports";
  if (auto st = make_dirs(reports); !st.is_ok()) return fail(st.message());
  for (const auto& id : ids) {
    auto path = write_report(c, id, reports + "/" + id + ".html");
    if (path.is_ok())
      std::printf("report: %s\n", path->c_str());
    else
      std::fprintf(stderr, "kiln: report of %s: %s\n", id.c_str(), path.status().message().c_str());
  }
  const std::string& registry = c.config.promoter.registry_dir;
  std::printf("registry: %s/verified_kernels.json (kiln registry --dir %s list)\n", registry.c_str(), registry.c_str());
  std::fflush(stdout);
  const int incomplete = campaigns_exit_code(*mine);
  return rc != 0 ? rc : incomplete;
}

}  // namespace

int cmd_up(const Common& common_options, const UpOptions& o) {
  std::string state = fs::absolute(o.state_dir.empty() ? common_options.config.up.state_dir : o.state_dir).string();
  Common c = common_options;
  if (o.demo) c.config.promoter.registry_dir = demo_registry_dir(c.config, state);
  const auto& cfg = c.config;
  // Nothing starts, and nothing is written, where another Kiln holds the ports.
  if (auto st = check_ports_free(ports_of(cfg)); !st.is_ok()) return fail(st.message());
  std::string logs = state + "/logs";
  if (auto st = make_dirs(logs); !st.is_ok()) {
    std::fprintf(stderr, "kiln: %s\n", st.message().c_str());
    return 1;
  }
  std::string bin = self_dir();
  std::vector<std::string> common = {"--state-dir", state};
  if (!c.config_path.empty()) {
    common.push_back("--config");
    common.push_back(fs::absolute(c.config_path).string());
  }
  std::vector<ChildSpec> specs;
  auto add = [&](const std::string& name, const std::string& exe, int metrics_port, bool broker,
                 std::vector<std::string> extra = {}) {
    ChildSpec s;
    s.name = name;
    s.argv = {bin + "/" + exe};
    s.argv.insert(s.argv.end(), common.begin(), common.end());
    s.argv.push_back("--metrics-port");
    s.argv.push_back(std::to_string(metrics_port));
    if (!c.broker.empty() && !broker) {
      s.argv.push_back("--broker");
      s.argv.push_back(c.broker);
    }
    s.argv.insert(s.argv.end(), extra.begin(), extra.end());
    s.log_path = logs + "/" + name + ".log";
    s.is_broker = broker;
    specs.push_back(std::move(s));
  };
  add("broker", "kiln-broker", cfg.broker.metrics_port, true);
  add("task-ingest", "kiln-task-ingest", cfg.ingest.metrics_port, false);
  add("llm-bridge", "kiln-llm-bridge", cfg.llm_bridge.metrics_port, false);
  for (int i = 0; i < cfg.up.compilers; ++i)
    add("compiler-" + std::to_string(i + 1), "kiln-compiler", replica_port(cfg.compiler.metrics_port, i), false);
  // One tester per GPU: tester i takes GPU i unless the config pins one index for all.
  const auto tester_backend = proto::parse_backend(cfg.tester.backend);
  const bool gpu_each = tester_backend.is_ok() && *tester_backend == proto::Backend::kCuda && cfg.tester.gpu_index < 0;
  for (int i = 0; i < cfg.up.testers; ++i) {
    add("tester-" + std::to_string(i + 1), "kiln-tester", replica_port(cfg.tester.metrics_port, i), false);
    if (gpu_each) specs.back().env.emplace_back("KILN_TESTER_GPU_INDEX", std::to_string(i));
  }
  add("scorer", "kiln-scorer", cfg.scorer.metrics_port, false);
  add("promoter", "kiln-promoter", cfg.promoter.metrics_port, false);
  if (o.demo) specs.back().env.emplace_back("KILN_PROMOTER_REGISTRY_DIR", cfg.promoter.registry_dir);
  for (const auto& s : specs) {
    if (::access(s.argv[0].c_str(), X_OK) != 0) {
      std::fprintf(stderr, "kiln: %s not found beside the kiln binary (build Kiln first: make build)\n",
                   s.argv[0].c_str());
      return 1;
    }
  }

  const std::atomic<bool>& stop = stop_on_signals();

  Supervisor sup(specs);
  if (auto st = sup.start(); !st.is_ok()) {
    std::fprintf(stderr, "kiln: %s\n", st.message().c_str());
    return 1;
  }
  // Wait for the broker to answer before going on.
  {
    zmq::context_t ctx(1);
    messaging::Client client(ctx, c.broker_endpoint());
    bool up = false;
    for (int i = 0; i < 20 && !stop && !up; ++i) {
      sup.poll();
      up = client.request("broker", "status", "", 0.5).is_ok();
    }
    if (!up) {
      std::fprintf(stderr, "kiln: the broker did not come up at %s (see %s/broker.log)\n", c.broker_endpoint().c_str(),
                   logs.c_str());
      sup.stop();
      return 1;
    }
  }
  std::fprintf(stderr, "kiln: up. broker %s, state and logs in %s\n", c.broker_endpoint().c_str(), state.c_str());
  if (cfg.up.compilers == 0 || cfg.up.testers == 0)
    std::fprintf(stderr, "kiln: %lld compiler(s) and %lld tester(s) here; workers elsewhere connect to %s\n",
                 static_cast<long long>(cfg.up.compilers), static_cast<long long>(cfg.up.testers),
                 cfg.broker.bind.c_str());
  if (cfg.broker.metrics_port > 0)
    std::fprintf(stderr, "kiln: metrics on http://127.0.0.1:%d/metrics (broker); the other services' ports are in %s\n",
                 cfg.broker.metrics_port, c.config_path.empty() ? "configs/kiln.yaml" : c.config_path.c_str());

  if (!o.demo) {
    std::fprintf(stderr, "kiln: submit a task with `kiln submit DIR --wait`; Ctrl-C stops every service\n");
    while (!stop) {
      sup.poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::fprintf(stderr, "kiln: stopping\n");
    sup.stop();
    return 0;
  }

  // --demo: submit the bundled tasks, show progress, print the results table.
  // Only the tasks this machine's testers can run: CUDA tasks wait forever without a GPU tester.
  auto backend = proto::parse_backend(cfg.tester.backend);
  if (!backend.is_ok()) {
    std::fprintf(stderr, "kiln: tester.backend: %s\n", backend.status().message().c_str());
    sup.stop();
    return 1;
  }
  std::vector<std::string> dirs = task::package_dirs(o.tasks_dir, *backend);
  if (dirs.empty()) {
    std::fprintf(stderr, "kiln: no %s tasks under %s\n", cfg.tester.backend.c_str(), o.tasks_dir.c_str());
    sup.stop();
    return 1;
  }
  std::vector<std::string> ids;
  for (const auto& d : dirs) {
    SubmitOptions so;
    so.dir = d;
    so.budget = o.budget;
    auto cid = submit_task(c, so);
    if (!cid.is_ok()) {
      std::fprintf(stderr, "kiln: %s\n", cid.status().message().c_str());
      continue;
    }
    std::fprintf(stderr, "kiln: submitted %s as campaign %s\n", fs::path(d).filename().c_str(), cid->c_str());
    ids.push_back(*cid);
  }
  int rc = ids.empty() ? 1 : wait_for_campaigns(c, ids, o.demo_timeout_s, false, [&] {
    sup.poll();
    return !stop.load();
  });
  if (rc == kInterruptedExit) std::fprintf(stderr, "kiln: interrupted: stopping every service\n");
  if (!ids.empty() && rc != kInterruptedExit) rc = show_demo_results(c, ids, state, rc);
  sup.stop();
  return rc;
}

}  // namespace kiln::cli
