#include <stdlib.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>

#include "kiln/config/config.h"
#include "kiln/core/files.h"

using kiln::config::KilnConfig;
using kiln::config::parse_config;
using Env = std::map<std::string, std::string>;

namespace {

KilnConfig parse_ok(const std::string& yaml, const Env& env = {}) {
  auto c = parse_config(yaml, "test.yaml", env);
  INFO((c.is_ok() ? std::string() : c.status().message()));
  REQUIRE(c.is_ok());
  return *c;
}

std::string parse_error(const std::string& yaml, const Env& env = {}) {
  auto c = parse_config(yaml, "test.yaml", env);
  REQUIRE_FALSE(c.is_ok());
  CHECK(c.status().code() == kiln::StatusCode::kInvalidArgument);
  return c.status().message();
}

void flatten(const YAML::Node& n, const std::string& prefix, std::vector<std::string>& out) {
  if (!n.IsMap() || prefix == "broker.lease_timeout_s" || prefix == "llm.ensemble") {
    out.push_back(prefix);
    return;
  }
  for (auto it = n.begin(); it != n.end(); ++it)
    flatten(it->second, prefix.empty() ? it->first.Scalar() : prefix + "." + it->first.Scalar(), out);
}

}  // namespace

TEST_CASE("empty text gives the defaults", "[config]") {
  KilnConfig c = parse_ok("");
  CHECK(c.source == "test.yaml");
  CHECK(c.broker.bind == "tcp://127.0.0.1:5555");
  CHECK(c.broker.max_attempts == 3);
  CHECK(c.broker.lease_timeout_s.at("default") == 60);
  CHECK(c.tester.timing.mode == "cold");
  CHECK(c.scorer.min_speedup == Approx(1.10));
  CHECK(c.promoter.registry_dir == "kernel_registry");
  CHECK(c.up.compilers == 2);
}

TEST_CASE("configs/kiln.yaml lists every key with its default", "[config]") {
  std::string path = std::string(KILN_SOURCE_DIR) + "/configs/kiln.yaml";
  auto text = kiln::read_file(path);
  REQUIRE(text.is_ok());
  KilnConfig file = parse_ok(*text);
  KilnConfig defaults = parse_ok("");
  CHECK(file.broker.bind == defaults.broker.bind);
  CHECK(file.broker.events_bind == defaults.broker.events_bind);
  CHECK(file.broker.max_message_bytes == defaults.broker.max_message_bytes);
  CHECK(file.broker.max_table_mb == defaults.broker.max_table_mb);
  CHECK(file.broker.blob_store == defaults.broker.blob_store);
  CHECK(file.broker.retention_days == defaults.broker.retention_days);
  CHECK(file.broker.retention_max_jobs == defaults.broker.retention_max_jobs);
  CHECK(file.broker.retention_interval_s == defaults.broker.retention_interval_s);
  CHECK(file.broker.lease_timeout_s == defaults.broker.lease_timeout_s);
  CHECK(file.compiler.nvcc == defaults.compiler.nvcc);
  CHECK(file.tester.timing.max_noise == defaults.tester.timing.max_noise);
  CHECK(file.tester.timing.precision == defaults.tester.timing.precision);
  CHECK(file.tester.pin_cores == defaults.tester.pin_cores);
  CHECK(file.tester.profile == defaults.tester.profile);
  CHECK(file.tester.profile_scope == defaults.tester.profile_scope);
  CHECK(file.tester.ncu == defaults.tester.ncu);
  CHECK(file.tester.profile_timeout_s == defaults.tester.profile_timeout_s);
  CHECK(file.scorer.min_speedup == defaults.scorer.min_speedup);
  CHECK(file.promoter.metrics_port == defaults.promoter.metrics_port);
  CHECK(file.up.log_level == defaults.up.log_level);
  CHECK(file.broker.external_bind == defaults.broker.external_bind);
  CHECK(file.broker.external_secret_key_file == defaults.broker.external_secret_key_file);
  CHECK(file.broker.external_public_key_file == defaults.broker.external_public_key_file);
  CHECK(file.broker.external_allowlist == defaults.broker.external_allowlist);
  CHECK(file.tester.gpu_claim_dir == defaults.tester.gpu_claim_dir);
  CHECK(file.compiler.nvcc_mode == defaults.compiler.nvcc_mode);
  CHECK(file.compiler.huge_pages == defaults.compiler.huge_pages);
  CHECK(file.compiler.lean_headers == defaults.compiler.lean_headers);
  CHECK(file.compiler.batch_max == defaults.compiler.batch_max);
  CHECK(file.compiler.batch_window_ms == defaults.compiler.batch_window_ms);
  CHECK(file.compiler.batch_cores == defaults.compiler.batch_cores);

  // Every key of KilnConfig appears in the file (and nothing else, or parsing would have failed).
  std::vector<std::string> leaves;
  flatten(YAML::Load(*text), "", leaves);
  CHECK(leaves.size() == 99);
  for (const std::string& leaf : leaves) {
    // Each leaf has a working environment override of the same name.
    std::string name = "KILN_";
    for (char ch : leaf) name.push_back(ch == '.' ? '_' : static_cast<char>(std::toupper(ch)));
    auto c = parse_config(*text, "kiln.yaml", {{name, "zzz"}});
    INFO(leaf << " -> " << (c.is_ok() ? "ok" : c.status().message()));
    CHECK((c.is_ok() || (c.status().message().find(leaf) != std::string::npos &&
                         c.status().message().find("unknown key") == std::string::npos)));
  }
}

TEST_CASE("values from the file replace the defaults", "[config]") {
  KilnConfig c = parse_ok(
      "broker:\n  max_attempts: 5\n  lease_timeout_s: {compile: 240}\n"
      "tester:\n  backend: cuda\n  pin_cores: [2, 3]\n  timing:\n    mode: warm\n    min_time_s: 0.25\n"
      "scorer: {max_in_flight: 8}\n");
  CHECK(c.broker.max_attempts == 5);
  CHECK(c.broker.lease_timeout_s.at("compile") == 240);
  CHECK(c.broker.lease_timeout_s.at("default") == 60);  // merged, not replaced
  CHECK(c.tester.backend == "cuda");
  CHECK(c.tester.pin_cores == std::vector<int64_t>{2, 3});
  CHECK(c.tester.timing.mode == "warm");
  CHECK(c.tester.timing.min_time_s == Approx(0.25));
  CHECK(c.tester.timing.max_time_s == Approx(15));
  CHECK(c.scorer.max_in_flight == 8);
  // An empty section is allowed and changes nothing.
  CHECK(parse_ok("ingest:\n").ingest.metrics_port == 9471);
}

TEST_CASE("unknown sections and keys name the key path", "[config]") {
  CHECK(parse_error("scorer:\n  max_in_flgiht: 8\n") == "test.yaml: scorer.max_in_flgiht: unknown key");
  CHECK(parse_error("scorerr:\n  max_in_flight: 8\n") == "test.yaml: scorerr: unknown section");
  CHECK(parse_error("tester:\n  timing:\n    moed: warm\n") == "test.yaml: tester.timing.moed: unknown key");
  CHECK(parse_error("scorer:\n  max_in_flight: 1\n  max_in_flight: 2\n") ==
        "test.yaml: scorer.max_in_flight: duplicate key");
  CHECK(parse_error("- a\n- b\n") == "test.yaml: expected a map of sections at the top level, got a list");
  CHECK(parse_error("broker: [1]\n") == "test.yaml: broker: expected a map, got a list");
  CHECK(parse_error("broker:\n  bind: [\n").starts_with("test.yaml: line "));
}

TEST_CASE("type errors name the path and the expected type", "[config]") {
  CHECK(parse_error("scorer:\n  max_in_flight: many\n") ==
        "test.yaml: scorer.max_in_flight: expected an integer, got \"many\"");
  CHECK(parse_error("scorer:\n  max_in_flight: 2.5\n") ==
        "test.yaml: scorer.max_in_flight: expected an integer, got \"2.5\"");
  CHECK(parse_error("promoter:\n  min_speedup: fast\n") ==
        "test.yaml: promoter.min_speedup: expected a number, got \"fast\"");
  CHECK(parse_error("broker:\n  bind: {a: 1}\n") == "test.yaml: broker.bind: expected a string, got a map");
  CHECK(parse_error("tester:\n  pin_cores: [0, x]\n") ==
        "test.yaml: tester.pin_cores[1]: expected an integer, got \"x\"");
  CHECK(parse_error("broker:\n  lease_timeout_s: {compile: soon}\n") ==
        "test.yaml: broker.lease_timeout_s.compile: expected a number, got \"soon\"");
  CHECK(parse_error("ingest:\n  metrics_port: 99999999999\n") ==
        "test.yaml: ingest.metrics_port: expected an integer, got \"99999999999\"");
}

TEST_CASE("validation checks ranges and choices", "[config]") {
  CHECK(parse_error("ingest: {metrics_port: 70000}\n") ==
        "test.yaml: ingest.metrics_port: expected a port in 0..65535, got 70000");
  CHECK(parse_error("broker: {max_attempts: 0}\n") ==
        "test.yaml: broker.max_attempts: expected an integer >= 1, got 0");
  CHECK(parse_error("broker: {blob_store: 2}\n") == "test.yaml: broker.blob_store: expected 0 or 1, got 2");
  CHECK(parse_error("compiler: {timeout_s: 0}\n") == "test.yaml: compiler.timeout_s: expected a number > 0, got 0");
  CHECK(parse_error("tester: {timeout_s: -1.5}\n") == "test.yaml: tester.timeout_s: expected a number > 0, got -1.5");
  CHECK(parse_error("tester: {timing: {mode: hot}}\n") ==
        "test.yaml: tester.timing.mode: expected cold | warm, got \"hot\"");
  CHECK(parse_error("tester: {backend: tpu}\n") == "test.yaml: tester.backend: expected cpu | cuda, got \"tpu\"");
  CHECK(parse_error("tester: {profile: nsys}\n") == "test.yaml: tester.profile: expected ncu | off, got \"nsys\"");
  CHECK(parse_error("tester: {profile_scope: best}\n") ==
        "test.yaml: tester.profile_scope: expected contenders | all, got \"best\"");
  CHECK(parse_error("tester: {profile_timeout_s: 0}\n").find("tester.profile_timeout_s") != std::string::npos);
  CHECK(parse_error("llm_bridge: {kind: oracle}\n") ==
        "test.yaml: llm_bridge.kind: expected tuner | llm, got \"oracle\"");
  CHECK(parse_error("broker: {bind: localhost}\n") ==
        "test.yaml: broker.bind: expected a ZeroMQ endpoint like tcp://127.0.0.1:5555, got \"localhost\"");
  CHECK(parse_error("broker: {lease_timeout_s: {compile: 0}}\n") ==
        "test.yaml: broker.lease_timeout_s.compile: expected a number > 0, got 0");
  CHECK(parse_error("tester: {timing: {min_time_s: 20}}\n") ==
        "test.yaml: tester.timing.max_time_s: must be >= tester.timing.min_time_s");
  CHECK(parse_error("up: {log_level: loud}\n").starts_with("test.yaml: up.log_level: expected trace | debug"));
  // `kiln up` with no workers of its own: they run elsewhere (a Slurm job) and connect to its broker.
  CHECK(parse_ok("up: {compilers: 0, testers: 0}\n").up.testers == 0);
  CHECK(parse_error("up: {compilers: -1}\n") == "test.yaml: up.compilers: expected an integer >= 0, got -1");
  CHECK(parse_error("tester: {timing: {precision: 1}}\n") ==
        "test.yaml: tester.timing.precision: must be < 1 (a relative half-width; 0 = off)");
  CHECK(parse_error("tester: {timing: {precision: -0.1}}\n").find("tester.timing.precision") != std::string::npos);
  CHECK(parse_ok("tester: {timing: {precision: 0}}\n").tester.timing.precision == 0);
  CHECK(parse_ok("broker: {metrics_port: 0}\n").broker.metrics_port == 0);
  CHECK(parse_error("tester: {slots: -1}\n") == "test.yaml: tester.slots: expected an integer >= 0, got -1");
  CHECK(parse_ok("tester: {backend: cuda}\n").tester.slots == 0);  // the backend's default
  CHECK(parse_error("tester: {backend: cuda, slots: 17}\n") == "test.yaml: tester.slots: at most 16, got 17");
  CHECK(parse_error("tester: {slots: 2}\n").starts_with("test.yaml: tester.slots: more than 1 needs backend cuda"));
  CHECK(parse_ok("tester: {backend: cuda, slots: 3}\n").tester.slots == 3);
  CHECK(parse_error("compiler: {batch_max: 0}\n") ==
        "test.yaml: compiler.batch_max: expected an integer in 1..64, got 0");
  CHECK(parse_error("compiler: {batch_window_ms: 10001}\n") ==
        "test.yaml: compiler.batch_window_ms: expected an integer in 0..10000, got 10001");
  CHECK(parse_ok("compiler: {slots: 4, batch_max: 8}\n").compiler.batch_max == 8);
  CHECK(parse_error("compiler: {batch_cores: -1}\n") ==
        "test.yaml: compiler.batch_cores: expected an integer in 0..4096, got -1");
  CHECK(parse_ok("compiler: {batch_cores: 16}\n").compiler.batch_cores == 16);
  CHECK(parse_error("scorer: {campaign: {screen_by_best: 2}}\n") ==
        "test.yaml: scorer.campaign.screen_by_best: expected 0 or 1, got 2");
}

TEST_CASE("promoter.min_speedup below Forge's 1.10 bar is refused", "[config]") {
  CHECK(parse_error("promoter: {min_speedup: 1.05}\n") ==
        "test.yaml: promoter.min_speedup: expected a number >= 1.10 (Forge's promotion bar), got 1.05");
  CHECK(parse_error("promoter: {min_speedup: 0}\n") ==
        "test.yaml: promoter.min_speedup: expected a number >= 1.10 (Forge's promotion bar), got 0");
  CHECK(parse_error("", {{"KILN_PROMOTER_MIN_SPEEDUP", "1.099"}})
            .ends_with("promoter.min_speedup: expected a number >= 1.10 (Forge's promotion bar), got 1.099"));
  CHECK(parse_ok("promoter: {min_speedup: 1.10}\n").promoter.min_speedup == Approx(1.10));
  CHECK(parse_ok("promoter: {min_speedup: 1.5}\n").promoter.min_speedup == Approx(1.5));
  CHECK(parse_ok("", {{"KILN_PROMOTER_MIN_SPEEDUP", "1.1"}}).promoter.min_speedup == Approx(1.10));
}

TEST_CASE("KILN_<SECTION>_<KEY> environment variables override the file", "[config]") {
  Env env{{"KILN_SCORER_MAX_IN_FLIGHT", "8"},
          {"KILN_TESTER_TIMING_MIN_TIME_S", "0.1"},
          {"KILN_BROKER_BIND", "tcp://0.0.0.0:6000"},
          {"KILN_LLM_BRIDGE_KIND", "llm"},
          {"KILN_TESTER_PIN_CORES", "0,1,2"},
          {"KILN_BROKER_LEASE_TIMEOUT_S", "compile: 240, test.cuda: 600"},
          {"KILN_BIN_DIR", "/somewhere"},  // not a section: ignored
          {"PATH", "/usr/bin"}};
  KilnConfig c = parse_ok("scorer: {max_in_flight: 2}\ntester: {timing: {min_time_s: 1.0}}\n", env);
  CHECK(c.scorer.max_in_flight == 8);
  CHECK(c.tester.timing.min_time_s == Approx(0.1));
  CHECK(c.broker.bind == "tcp://0.0.0.0:6000");
  CHECK(c.llm_bridge.kind == "llm");
  CHECK(c.tester.pin_cores == std::vector<int64_t>{0, 1, 2});
  CHECK(c.broker.lease_timeout_s.at("compile") == 240);
  CHECK(c.broker.lease_timeout_s.at("test.cuda") == 600);
  CHECK(c.broker.lease_timeout_s.at("default") == 60);

  CHECK(parse_error("", {{"KILN_SCORER_MAX_IN_FLIGHT", "lots"}}) ==
        "environment KILN_SCORER_MAX_IN_FLIGHT: scorer.max_in_flight: expected an integer, got \"lots\"");
  CHECK(parse_error("", {{"KILN_SCORER_MAX_INFLIGHT", "8"}}) ==
        "environment KILN_SCORER_MAX_INFLIGHT: scorer.max_inflight: unknown key");
  // Overrides are validated like the file.
  CHECK(parse_error("", {{"KILN_TESTER_TIMING_MODE", "hot"}}) ==
        "test.yaml: tester.timing.mode: expected cold | warm, got \"hot\"");
}

TEST_CASE("load_config reads a file and the process environment", "[config]") {
  kiln::TempDir dir;
  std::string path = dir.path() + "/kiln.yaml";
  REQUIRE(kiln::write_file_atomic(path, "scorer:\n  default_budget: 7\n").is_ok());
  ::setenv("KILN_SCORER_MAX_IN_FLIGHT", "6", 1);
  auto c = kiln::config::load_config(path);
  auto d = kiln::config::load_config("");
  ::unsetenv("KILN_SCORER_MAX_IN_FLIGHT");
  REQUIRE(c.is_ok());
  CHECK(c->source == path);
  CHECK(c->scorer.default_budget == 7);
  CHECK(c->scorer.max_in_flight == 6);
  REQUIRE(d.is_ok());
  CHECK(d->source == "defaults");
  CHECK(d->scorer.max_in_flight == 6);
  CHECK(kiln::config::load_config(dir.path() + "/missing.yaml").status().code() == kiln::StatusCode::kNotFound);
}

TEST_CASE("the external bridge endpoint is off by default and validated when set", "[config]") {
  KilnConfig d = parse_ok("");
  CHECK(d.broker.external_bind.empty());
  CHECK(d.broker.external_allowlist == "bridges.allow");
  KilnConfig c = parse_ok("broker:\n  external_bind: tcp://0.0.0.0:5557\n  external_allowlist: /etc/kiln/bridges\n",
                          {{"KILN_BROKER_EXTERNAL_SECRET_KEY_FILE", "keys/b.key"}});
  CHECK(c.broker.external_bind == "tcp://0.0.0.0:5557");
  CHECK(c.broker.external_allowlist == "/etc/kiln/bridges");
  CHECK(c.broker.external_secret_key_file == "keys/b.key");
  CHECK(parse_error("broker: {external_bind: 5557}\n") ==
        "test.yaml: broker.external_bind: expected a ZeroMQ endpoint like tcp://127.0.0.1:5555, got \"5557\"");
  CHECK(parse_error("broker: {external_bind: \"tcp://127.0.0.1:5555\"}\n") ==
        "test.yaml: broker.external_bind: must differ from broker.bind");
  CHECK(parse_error("broker: {external_allowlist: \"\"}\n") ==
        "test.yaml: broker.external_allowlist: expected a non-empty string");
}

TEST_CASE("the archive, campaign and llm sections parse and validate", "[config]") {
  KilnConfig d = parse_ok("");
  CHECK(d.scorer.archive.kind == "map_elites");
  CHECK(d.scorer.archive.islands == 4);
  CHECK(d.scorer.archive.dimensions.size() == 5);
  CHECK(d.scorer.archive.exploration_ratio == Approx(0.2));
  CHECK(d.scorer.campaign.prompt_evolution_interval == 5);
  CHECK(d.llm.api_key_env == "OPENAI_API_KEY");
  CHECK(d.llm.ensemble.empty());
  KilnConfig c = parse_ok(
      "scorer:\n  archive: {islands: 2, dimensions: [memory, compute]}\n  campaign: {patience: 6}\n"
      "llm:\n  base_url: http://127.0.0.1:8080/v1\n  ensemble: {a: 1, b: 3}\n",
      {{"KILN_LLM_TIMEOUT_S", "5"}, {"KILN_SCORER_ARCHIVE_DIMENSIONS", "parallelism"}});
  CHECK(c.scorer.archive.islands == 2);
  CHECK(c.scorer.archive.dimensions == std::vector<std::string>{"parallelism"});
  CHECK(c.scorer.campaign.patience == 6);
  CHECK(c.llm.base_url == "http://127.0.0.1:8080/v1");
  CHECK(c.llm.ensemble.at("b") == 3);
  CHECK(c.llm.timeout_s == 5);
  CHECK(parse_error("scorer: {archive: {dimensions: [speed]}}\n") ==
        "test.yaml: scorer.archive.dimensions[0]: expected memory | compute | parallelism | registers | "
        "shared_memory, got \"speed\"");
  CHECK(parse_error("scorer: {archive: {exploration_ratio: 0.5, exploitation_ratio: 0.6}}\n") ==
        "test.yaml: scorer.archive.exploitation_ratio: exploration_ratio + exploitation_ratio must be <= 1");
  CHECK(parse_error("llm: {base_url: localhost:8080}\n") ==
        "test.yaml: llm.base_url: expected an http:// or https:// URL, got \"localhost:8080\"");
  CHECK(parse_error("llm: {ensemble: {a: 0}}\n") == "test.yaml: llm.ensemble.a: expected a number > 0, got 0");
}
