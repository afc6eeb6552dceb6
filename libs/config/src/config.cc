// Configuration: parse the YAML, apply KILN_<SECTION>_<KEY> overrides, then validate (DESIGN §9). Every
// key is listed once in a table that binds its path to a field of KilnConfig, so the file parser, the
// environment overrides and the unknown-key check can never disagree about what exists.
#include "kiln/config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <variant>

#include "kiln/core/files.h"

extern char** environ;  // NOLINT: POSIX

namespace kiln::config {

namespace {

using DoubleMap = std::map<std::string, double>;
using IntList = std::vector<int64_t>;
using StringList = std::vector<std::string>;
using Field = std::variant<std::string*, int64_t*, int*, double*, DoubleMap*, IntList*, StringList*>;

struct Key {
  std::string path;  // "tester.timing.min_time_s"
  Field field;
};

const std::vector<std::string>& sections() {
  static const std::vector<std::string> kSections{"broker", "ingest",   "llm_bridge", "compiler", "tester",
                                                  "scorer", "promoter", "up",         "llm"};
  return kSections;
}

std::vector<Key> keys_of(KilnConfig& c) {
  return {
      {"broker.bind", &c.broker.bind},
      {"broker.events_bind", &c.broker.events_bind},
      {"broker.db_path", &c.broker.db_path},
      {"broker.max_attempts", &c.broker.max_attempts},
      {"broker.heartbeat_interval_s", &c.broker.heartbeat_interval_s},
      {"broker.heartbeat_liveness", &c.broker.heartbeat_liveness},
      {"broker.max_message_bytes", &c.broker.max_message_bytes},
      {"broker.max_table_mb", &c.broker.max_table_mb},
      {"broker.blob_store", &c.broker.blob_store},
      {"broker.retention_days", &c.broker.retention_days},
      {"broker.retention_max_jobs", &c.broker.retention_max_jobs},
      {"broker.retention_interval_s", &c.broker.retention_interval_s},
      {"broker.device_wait_s", &c.broker.device_wait_s},
      {"broker.lease_timeout_s", &c.broker.lease_timeout_s},
      {"broker.metrics_port", &c.broker.metrics_port},
      {"broker.external_bind", &c.broker.external_bind},
      {"broker.external_secret_key_file", &c.broker.external_secret_key_file},
      {"broker.external_public_key_file", &c.broker.external_public_key_file},
      {"broker.external_allowlist", &c.broker.external_allowlist},
      {"ingest.metrics_port", &c.ingest.metrics_port},
      {"llm_bridge.kind", &c.llm_bridge.kind},
      {"llm_bridge.slots", &c.llm_bridge.slots},
      {"llm_bridge.metrics_port", &c.llm_bridge.metrics_port},
      {"compiler.cache_dir", &c.compiler.cache_dir},
      {"compiler.timeout_s", &c.compiler.timeout_s},
      {"compiler.cxx", &c.compiler.cxx},
      {"compiler.nvcc", &c.compiler.nvcc},
      {"compiler.cuda_arch", &c.compiler.cuda_arch},
      {"compiler.nvcc_mode", &c.compiler.nvcc_mode},
      {"compiler.huge_pages", &c.compiler.huge_pages},
      {"compiler.lean_headers", &c.compiler.lean_headers},
      {"compiler.max_log_bytes", &c.compiler.max_log_bytes},
      {"compiler.slots", &c.compiler.slots},
      {"compiler.batch_max", &c.compiler.batch_max},
      {"compiler.batch_window_ms", &c.compiler.batch_window_ms},
      {"compiler.batch_cores", &c.compiler.batch_cores},
      {"compiler.metrics_port", &c.compiler.metrics_port},
      {"tester.backend", &c.tester.backend},
      {"tester.gpu_index", &c.tester.gpu_index},
      {"tester.gpu_claim_dir", &c.tester.gpu_claim_dir},
      {"tester.timeout_s", &c.tester.timeout_s},
      {"tester.cpu_time_limit_s", &c.tester.cpu_time_limit_s},
      {"tester.memory_limit_mb", &c.tester.memory_limit_mb},
      {"tester.pin_cores", &c.tester.pin_cores},
      {"tester.slots", &c.tester.slots},
      {"tester.timing.mode", &c.tester.timing.mode},
      {"tester.timing.min_samples", &c.tester.timing.min_samples},
      {"tester.timing.min_time_s", &c.tester.timing.min_time_s},
      {"tester.timing.max_noise", &c.tester.timing.max_noise},
      {"tester.timing.max_time_s", &c.tester.timing.max_time_s},
      {"tester.timing.warmup_iters", &c.tester.timing.warmup_iters},
      {"tester.timing.screen_below", &c.tester.timing.screen_below},
      {"tester.timing.precision", &c.tester.timing.precision},
      {"tester.timing.settle_calls", &c.tester.timing.settle_calls},
      {"tester.metrics_port", &c.tester.metrics_port},
      {"tester.profile", &c.tester.profile},
      {"tester.screen_by_best", &c.tester.screen_by_best},
      {"tester.profile_scope", &c.tester.profile_scope},
      {"tester.ncu", &c.tester.ncu},
      {"tester.python", &c.tester.python},
      {"tester.profile_timeout_s", &c.tester.profile_timeout_s},
      {"tester.sandbox_uid", &c.tester.sandbox_uid},
      {"tester.allow_unconfined", &c.tester.allow_unconfined},
      {"scorer.db_path", &c.scorer.db_path},
      {"scorer.default_budget", &c.scorer.default_budget},
      {"scorer.max_in_flight", &c.scorer.max_in_flight},
      {"scorer.min_speedup", &c.scorer.min_speedup},
      {"scorer.metrics_port", &c.scorer.metrics_port},
      {"scorer.archive.kind", &c.scorer.archive.kind},
      {"scorer.archive.dimensions", &c.scorer.archive.dimensions},
      {"scorer.archive.islands", &c.scorer.archive.islands},
      {"scorer.archive.migration_interval", &c.scorer.archive.migration_interval},
      {"scorer.archive.exploration_ratio", &c.scorer.archive.exploration_ratio},
      {"scorer.archive.exploitation_ratio", &c.scorer.archive.exploitation_ratio},
      {"scorer.archive.inspirations", &c.scorer.archive.inspirations},
      {"scorer.archive.elite_capacity", &c.scorer.archive.elite_capacity},
      {"scorer.campaign.target_speedup", &c.scorer.campaign.target_speedup},
      {"scorer.campaign.patience", &c.scorer.campaign.patience},
      {"scorer.campaign.prompt_evolution_interval", &c.scorer.campaign.prompt_evolution_interval},
      {"scorer.campaign.tuner_block_sampling", &c.scorer.campaign.tuner_block_sampling},
      {"scorer.campaign.screen_by_best", &c.scorer.campaign.screen_by_best},
      {"promoter.registry_dir", &c.promoter.registry_dir},
      {"promoter.min_speedup", &c.promoter.min_speedup},
      {"promoter.metrics_port", &c.promoter.metrics_port},
      {"up.state_dir", &c.up.state_dir},
      {"up.compilers", &c.up.compilers},
      {"up.testers", &c.up.testers},
      {"up.log_level", &c.up.log_level},
      {"llm.base_url", &c.llm.base_url},
      {"llm.model", &c.llm.model},
      {"llm.ensemble", &c.llm.ensemble},
      {"llm.api_key_env", &c.llm.api_key_env},
      {"llm.temperature", &c.llm.temperature},
      {"llm.max_tokens", &c.llm.max_tokens},
      {"llm.timeout_s", &c.llm.timeout_s},
      {"llm.total_timeout_s", &c.llm.total_timeout_s},
      {"llm.max_retries", &c.llm.max_retries},
      {"llm.backoff_initial_s", &c.llm.backoff_initial_s},
      {"llm.backoff_max_s", &c.llm.backoff_max_s},
      {"llm.gpu_name", &c.llm.gpu_name},
  };
}

// Errors travel as this exception inside this file only; parse_config turns it into a Status.
struct ConfigError {
  std::string message;
};

[[noreturn]] void fail(const std::string& where, const std::string& path, const std::string& what) {
  throw ConfigError{where + ": " + path + ": " + what};
}

std::string quote(std::string_view s) {
  constexpr size_t kMaxChars = 60;
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMaxChars; ++i) out.push_back(s[i] == '\n' ? ' ' : s[i]);
  if (s.size() > kMaxChars) out += "...";
  return out + "\"";
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return quote(n.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "nothing";
  }
}

std::string env_name(const std::string& path) {
  std::string out = "KILN_";
  for (char c : path) out.push_back(c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return out;
}

std::optional<int64_t> to_int(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> to_double(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Sets one field from its text (a YAML scalar or an environment value): the same rules either way.
void set_scalar(const Field& field, const std::string& text, const std::string& where, const std::string& path) {
  if (auto* s = std::get_if<std::string*>(&field)) {
    **s = text;
  } else if (auto* i64 = std::get_if<int64_t*>(&field)) {
    auto v = to_int(text);
    if (!v) fail(where, path, "expected an integer, got " + quote(text));
    **i64 = *v;
  } else if (auto* i = std::get_if<int*>(&field)) {
    auto v = to_int(text);
    if (!v || *v < INT_MIN || *v > INT_MAX) fail(where, path, "expected an integer, got " + quote(text));
    **i = static_cast<int>(*v);
  } else if (auto* d = std::get_if<double*>(&field)) {
    auto v = to_double(text);
    if (!v) fail(where, path, "expected a number, got " + quote(text));
    **d = *v;
  }
}

void set_from_node(const Field& field, const YAML::Node& n, const std::string& where, const std::string& path) {
  if (auto* m = std::get_if<DoubleMap*>(&field)) {
    // Entries merge over the defaults, so naming one service keeps the others (and "default").
    if (n.IsNull()) return;
    if (!n.IsMap()) fail(where, path, "expected a map of name: number, got " + describe(n));
    for (auto it = n.begin(); it != n.end(); ++it) {
      std::string k = it->first.IsScalar() ? it->first.Scalar() : std::string();
      if (k.empty()) fail(where, path, "expected string keys, got " + describe(it->first));
      auto v = it->second.IsScalar() ? to_double(it->second.Scalar()) : std::nullopt;
      if (!v) fail(where, path + "." + k, "expected a number, got " + describe(it->second));
      (**m)[k] = *v;
    }
    return;
  }
  if (auto* sl = std::get_if<StringList*>(&field)) {
    if (n.IsNull()) {
      (*sl)->clear();
      return;
    }
    if (!n.IsSequence()) fail(where, path, "expected a list of strings, got " + describe(n));
    StringList out;
    for (size_t i = 0; i < n.size(); ++i) {
      if (!n[i].IsScalar())
        fail(where, path + "[" + std::to_string(i) + "]", "expected a string, got " + describe(n[i]));
      out.push_back(n[i].Scalar());
    }
    **sl = std::move(out);
    return;
  }
  if (auto* l = std::get_if<IntList*>(&field)) {
    if (n.IsNull()) {
      (*l)->clear();
      return;
    }
    if (!n.IsSequence()) fail(where, path, "expected a list of integers, got " + describe(n));
    IntList out;
    for (size_t i = 0; i < n.size(); ++i) {
      auto v = n[i].IsScalar() ? to_int(n[i].Scalar()) : std::nullopt;
      if (!v) fail(where, path + "[" + std::to_string(i) + "]", "expected an integer, got " + describe(n[i]));
      out.push_back(*v);
    }
    **l = std::move(out);
    return;
  }
  if (!n.IsScalar()) {
    const char* expected = std::holds_alternative<std::string*>(field) ? "a string"
                           : std::holds_alternative<double*>(field)    ? "a number"
                                                                       : "an integer";
    fail(where, path, std::string("expected ") + expected + ", got " + describe(n));
  }
  set_scalar(field, n.Scalar(), where, path);
}

// Walks one YAML map at `prefix` ("tester" or "tester.timing") and applies the keys it holds.
void apply_map(const YAML::Node& n, const std::string& prefix, const std::vector<Key>& keys, const std::string& where) {
  if (n.IsNull()) return;
  if (!n.IsMap()) fail(where, prefix, "expected a map, got " + describe(n));
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar()) fail(where, prefix, "expected string keys, got " + describe(it->first));
    std::string path = prefix + "." + it->first.Scalar();
    if (!seen.insert(path).second) fail(where, path, "duplicate key");
    auto exact = std::find_if(keys.begin(), keys.end(), [&](const Key& k) { return k.path == path; });
    if (exact != keys.end()) {
      set_from_node(exact->field, it->second, where, path);
      continue;
    }
    bool is_group = std::any_of(keys.begin(), keys.end(), [&](const Key& k) { return k.path.starts_with(path + "."); });
    if (!is_group) fail(where, path, "unknown key");
    apply_map(it->second, path, keys, where);
  }
}

void apply_env(const std::map<std::string, std::string>& env, const std::vector<Key>& keys) {
  std::set<std::string> known;
  for (const Key& k : keys) {
    std::string name = env_name(k.path);
    known.insert(name);
    auto it = env.find(name);
    if (it == env.end()) continue;
    const std::string where = "environment " + name;
    if (std::holds_alternative<DoubleMap*>(k.field) || std::holds_alternative<IntList*>(k.field) ||
        std::holds_alternative<StringList*>(k.field)) {
      // Collections take YAML flow syntax; the brackets may be left out: "compile: 200" or "0,1,2".
      bool is_map = std::holds_alternative<DoubleMap*>(k.field);
      std::string text = it->second;
      if (!text.empty() && text.front() != (is_map ? '{' : '['))
        text = (is_map ? "{" : "[") + text + (is_map ? "}" : "]");
      YAML::Node node;
      try {
        node = YAML::Load(text);
      } catch (const YAML::Exception& e) {
        fail(where, k.path, "cannot parse " + quote(it->second) + ": " + e.msg);
      }
      set_from_node(k.field, node, where, k.path);
    } else {
      set_scalar(k.field, it->second, where, k.path);
    }
  }
  // A misspelt override must not be silently ignored: a variable under a section prefix has to name a key.
  for (const auto& [name, value] : env) {
    for (const std::string& s : sections()) {
      std::string prefix = env_name(s) + "_";
      if (name.starts_with(prefix) && !known.count(name)) {
        std::string rest = name.substr(prefix.size());
        std::transform(rest.begin(), rest.end(), rest.begin(), [](unsigned char c) { return std::tolower(c); });
        fail("environment " + name, s + "." + rest, "unknown key");
      }
    }
  }
}

// ------------------------------------------------------------------------------------- validation

class Validator {
 public:
  explicit Validator(std::string where) : where_(std::move(where)) {}

  void port(const std::string& path, int v) {
    if (v < 0 || v > 65535) fail(where_, path, "expected a port in 0..65535, got " + std::to_string(v));
  }
  void at_least(const std::string& path, int64_t v, int64_t min) {
    if (v < min) fail(where_, path, "expected an integer >= " + std::to_string(min) + ", got " + std::to_string(v));
  }
  void in_range(const std::string& path, int64_t v, int64_t min, int64_t max) {
    if (v < min || v > max) {
      fail(where_, path,
           "expected an integer in " + std::to_string(min) + ".." + std::to_string(max) + ", got " + std::to_string(v));
    }
  }
  void positive(const std::string& path, double v) {
    if (!(v > 0)) fail(where_, path, "expected a number > 0, got " + format(v));
  }
  void non_negative(const std::string& path, double v) {
    if (!(v >= 0)) fail(where_, path, "expected a number >= 0, got " + format(v));
  }
  void flag(const std::string& path, int64_t v) {
    if (v != 0 && v != 1) fail(where_, path, "expected 0 or 1, got " + std::to_string(v));
  }
  void non_empty(const std::string& path, const std::string& v) {
    if (v.empty()) fail(where_, path, "expected a non-empty string");
  }
  void one_of(const std::string& path, const std::string& v, std::initializer_list<std::string_view> allowed) {
    std::string list;
    for (auto a : allowed) {
      if (a == v) return;
      list += (list.empty() ? "" : " | ") + std::string(a);
    }
    fail(where_, path, "expected " + list + ", got " + quote(v));
  }
  void endpoint(const std::string& path, const std::string& v) {
    if (v.find("://") == std::string::npos || v.starts_with("://"))
      fail(where_, path, "expected a ZeroMQ endpoint like tcp://127.0.0.1:5555, got " + quote(v));
  }
  [[noreturn]] void error(const std::string& path, const std::string& what) { fail(where_, path, what); }

 private:
  static std::string format(double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  std::string where_;
};

void validate(const KilnConfig& c, const std::string& where) {
  Validator v(where);
  const auto& b = c.broker;
  v.endpoint("broker.bind", b.bind);
  v.endpoint("broker.events_bind", b.events_bind);
  v.non_empty("broker.db_path", b.db_path);
  v.at_least("broker.max_attempts", b.max_attempts, 1);
  v.positive("broker.heartbeat_interval_s", b.heartbeat_interval_s);
  v.at_least("broker.heartbeat_liveness", b.heartbeat_liveness, 1);
  constexpr int64_t kMinMessageBytes = 4096;  // below this not even a READY with capabilities fits
  v.at_least("broker.max_message_bytes", b.max_message_bytes, kMinMessageBytes);
  v.at_least("broker.max_table_mb", b.max_table_mb, int64_t{0});
  v.flag("broker.blob_store", b.blob_store);
  v.non_negative("broker.retention_days", b.retention_days);
  v.at_least("broker.retention_max_jobs", b.retention_max_jobs, int64_t{0});
  v.non_negative("broker.retention_interval_s", b.retention_interval_s);
  v.non_negative("broker.device_wait_s", b.device_wait_s);
  if (!b.lease_timeout_s.count("default")) v.error("broker.lease_timeout_s.default", "missing (required)");
  for (const auto& [service, seconds] : b.lease_timeout_s) v.positive("broker.lease_timeout_s." + service, seconds);
  v.port("broker.metrics_port", b.metrics_port);
  if (!b.external_bind.empty()) {
    v.endpoint("broker.external_bind", b.external_bind);
    if (b.external_bind == b.bind) v.error("broker.external_bind", "must differ from broker.bind");
  }
  v.non_empty("broker.external_secret_key_file", b.external_secret_key_file);
  v.non_empty("broker.external_public_key_file", b.external_public_key_file);
  v.non_empty("broker.external_allowlist", b.external_allowlist);

  v.port("ingest.metrics_port", c.ingest.metrics_port);

  v.one_of("llm_bridge.kind", c.llm_bridge.kind, {"tuner", "llm"});
  v.at_least("llm_bridge.slots", c.llm_bridge.slots, 1);
  v.port("llm_bridge.metrics_port", c.llm_bridge.metrics_port);

  const auto& cc = c.compiler;
  v.non_empty("compiler.cache_dir", cc.cache_dir);
  v.positive("compiler.timeout_s", cc.timeout_s);
  v.non_empty("compiler.cxx", cc.cxx);
  v.non_empty("compiler.nvcc", cc.nvcc);
  v.non_empty("compiler.cuda_arch", cc.cuda_arch);
  v.one_of("compiler.nvcc_mode", cc.nvcc_mode, {"graph", "serial"});
  v.one_of("compiler.huge_pages", cc.huge_pages, {"on", "off"});
  v.one_of("compiler.lean_headers", cc.lean_headers, {"on", "off"});
  v.at_least("compiler.max_log_bytes", cc.max_log_bytes, 1);
  v.at_least("compiler.slots", cc.slots, 1);
  v.in_range("compiler.batch_max", cc.batch_max, 1, 64);
  v.in_range("compiler.batch_window_ms", cc.batch_window_ms, 0, 10000);
  v.in_range("compiler.batch_cores", cc.batch_cores, 0, 4096);
  v.port("compiler.metrics_port", cc.metrics_port);

  const auto& t = c.tester;
  v.one_of("tester.backend", t.backend, {"cpu", "cuda"});
  v.at_least("tester.gpu_index", t.gpu_index, -1);
  v.positive("tester.timeout_s", t.timeout_s);
  v.at_least("tester.cpu_time_limit_s", t.cpu_time_limit_s, 1);
  v.at_least("tester.memory_limit_mb", t.memory_limit_mb, 1);
  for (size_t i = 0; i < t.pin_cores.size(); ++i)
    v.at_least("tester.pin_cores[" + std::to_string(i) + "]", t.pin_cores[i], 0);
  v.at_least("tester.slots", t.slots, 0);
  if (t.slots > 16) v.error("tester.slots", "at most 16, got " + std::to_string(t.slots));
  if (t.slots > 1 && t.backend != "cuda") {
    v.error("tester.slots",
            "more than 1 needs backend cuda (on the CPU another evaluation's host work would disturb the timing)");
  }
  v.one_of("tester.timing.mode", t.timing.mode, {"cold", "warm"});
  v.one_of("tester.profile", t.profile, {"ncu", "off"});
  v.flag("tester.screen_by_best", t.screen_by_best);
  v.one_of("tester.profile_scope", t.profile_scope, {"contenders", "all"});
  v.positive("tester.profile_timeout_s", t.profile_timeout_s);
  v.flag("tester.allow_unconfined", t.allow_unconfined);
  v.in_range("tester.sandbox_uid", t.sandbox_uid, 1, 4294967200);
  v.at_least("tester.timing.min_samples", t.timing.min_samples, 1);
  v.non_negative("tester.timing.min_time_s", t.timing.min_time_s);
  v.positive("tester.timing.max_noise", t.timing.max_noise);
  v.positive("tester.timing.max_time_s", t.timing.max_time_s);
  if (t.timing.max_time_s < t.timing.min_time_s)
    v.error("tester.timing.max_time_s", "must be >= tester.timing.min_time_s");
  v.at_least("tester.timing.warmup_iters", t.timing.warmup_iters, 0);
  v.non_negative("tester.timing.screen_below", t.timing.screen_below);
  v.non_negative("tester.timing.precision", t.timing.precision);
  v.at_least("tester.timing.settle_calls", t.timing.settle_calls, 0);
  if (t.timing.precision >= 1) v.error("tester.timing.precision", "must be < 1 (a relative half-width; 0 = off)");
  if (t.timing.screen_below > c.scorer.min_speedup) {
    v.error("tester.timing.screen_below",
            "must be <= scorer.min_speedup (a screened-out candidate could have been promoted)");
  }
  v.port("tester.metrics_port", t.metrics_port);

  const auto& s = c.scorer;
  v.non_empty("scorer.db_path", s.db_path);
  v.at_least("scorer.default_budget", s.default_budget, 0);
  v.at_least("scorer.max_in_flight", s.max_in_flight, 1);
  v.positive("scorer.min_speedup", s.min_speedup);
  v.port("scorer.metrics_port", s.metrics_port);
  v.one_of("scorer.archive.kind", s.archive.kind, {"map_elites", "elites"});
  if (s.archive.dimensions.empty()) v.error("scorer.archive.dimensions", "expected at least one dimension");
  for (size_t i = 0; i < s.archive.dimensions.size(); ++i)
    v.one_of("scorer.archive.dimensions[" + std::to_string(i) + "]", s.archive.dimensions[i],
             {"memory", "compute", "parallelism", "registers", "shared_memory"});
  v.at_least("scorer.archive.islands", s.archive.islands, 1);
  v.at_least("scorer.archive.migration_interval", s.archive.migration_interval, 0);
  v.non_negative("scorer.archive.exploration_ratio", s.archive.exploration_ratio);
  v.non_negative("scorer.archive.exploitation_ratio", s.archive.exploitation_ratio);
  if (s.archive.exploration_ratio + s.archive.exploitation_ratio > 1)
    v.error("scorer.archive.exploitation_ratio", "exploration_ratio + exploitation_ratio must be <= 1");
  v.at_least("scorer.archive.inspirations", s.archive.inspirations, 0);
  v.at_least("scorer.archive.elite_capacity", s.archive.elite_capacity, 1);
  v.non_negative("scorer.campaign.target_speedup", s.campaign.target_speedup);
  v.at_least("scorer.campaign.patience", s.campaign.patience, 0);
  v.at_least("scorer.campaign.prompt_evolution_interval", s.campaign.prompt_evolution_interval, 0);
  v.flag("scorer.campaign.tuner_block_sampling", s.campaign.tuner_block_sampling);
  v.flag("scorer.campaign.screen_by_best", s.campaign.screen_by_best);

  v.non_empty("promoter.registry_dir", c.promoter.registry_dir);
  // Forge's promotion bar. Readers of the registry take an entry as at least 10 % faster than its
  // reference; a lower bar would admit kernels they would wrongly trust. Higher bars are fine.
  constexpr double kForgeMinSpeedup = 1.10;
  if (!(c.promoter.min_speedup >= kForgeMinSpeedup)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", c.promoter.min_speedup);
    v.error("promoter.min_speedup", std::string("expected a number >= 1.10 (Forge's promotion bar), got ") + got);
  }
  v.port("promoter.metrics_port", c.promoter.metrics_port);

  const auto& l = c.llm;
  if (!l.base_url.starts_with("http://") && !l.base_url.starts_with("https://"))
    v.error("llm.base_url", "expected an http:// or https:// URL, got " + quote(l.base_url));
  v.non_empty("llm.model", l.model);
  for (const auto& [model, weight] : l.ensemble) v.positive("llm.ensemble." + model, weight);
  if (l.temperature < 0 || l.temperature > 2) v.error("llm.temperature", "expected a number in 0..2");
  v.at_least("llm.max_tokens", l.max_tokens, 1);
  v.positive("llm.timeout_s", l.timeout_s);
  v.positive("llm.total_timeout_s", l.total_timeout_s);
  v.at_least("llm.max_retries", l.max_retries, 0);
  v.non_negative("llm.backoff_initial_s", l.backoff_initial_s);
  v.non_negative("llm.backoff_max_s", l.backoff_max_s);

  v.non_empty("up.state_dir", c.up.state_dir);
  v.at_least("up.compilers", c.up.compilers, 0);  // 0: the workers run elsewhere (a Slurm job, other hosts)
  v.at_least("up.testers", c.up.testers, 0);
  v.one_of("up.log_level", c.up.log_level, {"trace", "debug", "info", "warn", "error", "critical", "off"});
}

}  // namespace

Result<KilnConfig> parse_config(const std::string& yaml_text, const std::string& source_name,
                                const std::map<std::string, std::string>& env) {
  KilnConfig config;
  config.source = source_name;
  const std::vector<Key> keys = keys_of(config);
  try {
    YAML::Node root;
    try {
      root = YAML::Load(yaml_text);
    } catch (const YAML::ParserException& e) {
      return invalid_argument(source_name + ": line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
    }
    if (!root.IsNull() && !root.IsMap())
      return invalid_argument(source_name + ": expected a map of sections at the top level, got " + describe(root));
    if (root.IsMap()) {
      std::set<std::string> seen;
      for (auto it = root.begin(); it != root.end(); ++it) {
        std::string section = it->first.IsScalar() ? it->first.Scalar() : std::string();
        if (!seen.insert(section).second) fail(source_name, section, "duplicate section");
        if (std::find(sections().begin(), sections().end(), section) == sections().end())
          fail(source_name, section.empty() ? describe(it->first) : section, "unknown section");
        apply_map(it->second, section, keys, source_name);
      }
    }
    apply_env(env, keys);
    validate(config, source_name);
  } catch (const ConfigError& e) {
    return invalid_argument(e.message);
  } catch (const YAML::Exception& e) {
    return invalid_argument(source_name + ": " + e.msg);
  }
  return config;
}

Result<KilnConfig> load_config(const std::string& path) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    if (!entry.starts_with("KILN_")) continue;
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  if (path.empty()) return parse_config("", "defaults", env);
  constexpr size_t kMaxConfigBytes = 1u << 20;
  auto text = read_file(path, kMaxConfigBytes);
  if (!text.is_ok()) return text.status();
  return parse_config(*text, path, env);
}

}  // namespace kiln::config
