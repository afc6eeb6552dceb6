// A Kiln installation laid out as `kiln up` lays it out, for the confinement batteries (tests/unit/tester,
// tests/gpu): Kiln's own files with content, a folder anyone may write in, and copies of the evaluators any
// user may run. Everything is readable and writable by anyone, so that only the confinement stands between
// a candidate and them. Test-only.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kiln/config/config.h"
#include "kiln/core/files.h"
#include "kiln/tester/confinement.h"
#include "kiln/tester/handler.h"
#include "kiln/testing/hostile_probe.h"

namespace kiln::testing {

namespace fs = std::filesystem;

// A Kiln installation as `kiln up` lays it out, outside /tmp (the child's /tmp is its own anyway): the state
// directory (job table, archive, logs, locks), the config, the registry, the user's home and a folder
// anyone may write in, and a copy of kiln-eval any user may run.
struct Install {
  std::string root;
  std::string state, config, registry, home, outside, bin;
  kiln::config::KilnConfig cfg;

  Install() {
    char name[] = "/var/tmp/kiln-tester-confine-XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    root = name;
    state = root + "/repo/.kiln";
    config = root + "/repo/configs/kiln.yaml";
    registry = root + "/repo/kernel_registry";
    home = root + "/home";
    outside = root + "/outside";
    bin = root + "/bin";
    for (const auto& d : {state + "/logs", state + "/locks", root + "/repo/configs", registry, home, outside, bin})
      REQUIRE(kiln::make_dirs(d).is_ok());
    REQUIRE(kiln::write_file_atomic(state + "/broker.db", "the job table").is_ok());
    REQUIRE(kiln::write_file_atomic(state + "/archive.db", "the archive").is_ok());
    REQUIRE(kiln::write_file_atomic(state + "/logs/tester.log", "a log line").is_ok());
    REQUIRE(kiln::write_file_atomic(config, "llm: {api_key_env: OPENAI_API_KEY}\n").is_ok());
    REQUIRE(kiln::write_file_atomic(registry + "/verified_kernels.json", "{\"kernels\": []}\n").is_ok());
    REQUIRE(kiln::write_file_atomic(home + "/.secret", "a secret of the user").is_ok());
    for (const char* evaluator : {"kiln-eval", "kiln-eval-cuda"}) {
      const std::string built = std::string(KILN_BINARY_DIR "/bin/") + evaluator;
      if (fs::exists(built)) fs::copy_file(built, bin + "/" + evaluator);
    }
    // Readable and writable by anyone, so that a child running as someone else would succeed if it could
    // reach them: only the confinement stands in the way.
    for (const auto& e : fs::recursive_directory_iterator(root))
      ::chmod(e.path().c_str(), e.is_directory() ? 0777 : 0666);
    ::chmod(root.c_str(), 0777);
    for (const auto& e : fs::directory_iterator(bin)) ::chmod(e.path().c_str(), 0755);
    cfg.source = config;
    cfg.promoter.registry_dir = registry;
  }
  ~Install() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  Install(const Install&) = delete;
  Install& operator=(const Install&) = delete;

  ProbeTargets targets(int broker_port) const {
    ProbeTargets t;
    t.outside_dir = outside;
    t.registry_file = registry + "/verified_kernels.json";
    t.job_table = state + "/broker.db";
    t.archive = state + "/archive.db";
    t.config_file = config;
    t.log_file = state + "/logs/tester.log";
    t.home_secret = home + "/.secret";
    t.broker_port = broker_port;
    t.tester_pid = ::getpid();
    t.environ_marker = "KILN_CONFINE_MARKER=kiln-tester-environ-marker";
    return t;
  }

  // What nothing may have changed.
  std::string unchanged() const {
    if (*kiln::read_file(state + "/broker.db") != "the job table") return "the job table changed";
    if (*kiln::read_file(state + "/archive.db") != "the archive") return "the archive changed";
    if (*kiln::read_file(registry + "/verified_kernels.json") != "{\"kernels\": []}\n") return "the registry changed";
    if (*kiln::read_file(config) != "llm: {api_key_env: OPENAI_API_KEY}\n") return "the config changed";
    if (fs::exists(outside + "/planted")) return "a file was planted outside";
    return "";
  }

  kiln::tester::TesterOptions options(const std::string& evaluator = "kiln-eval") const {
    kiln::tester::TesterOptions o;
    o.eval_binary = bin + "/" + evaluator;
    o.timeout_s = 60;
    o.worker_id = "confine-test";
    o.timing.mode = "warm";
    o.timing.min_samples = 5;
    o.timing.min_time_s = 0.02;
    o.timing.max_time_s = 0.5;
    o.timing.warmup_iters = 1;
    o.slots = 2;  // so the device lock is in play too
    o.lock_dir = state + "/locks";
    o.hidden_paths = kiln::tester::kiln_private_paths(cfg, state, home);
    return o;
  }
};

}  // namespace kiln::testing
