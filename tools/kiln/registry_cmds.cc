// `kiln registry list|show|verify|match`: read, check and query kernel_registry/verified_kernels.json.
#include "registry_cmds.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiln/registry/match.h"
#include "kiln/registry/registry.h"

namespace kiln::cli {

namespace {

// `kiln registry match --help` after the options: the rules of kiln/registry/match.h, in their order.
constexpr const char* kMatchRules = R"(
Rules, in order (libs/registry/include/kiln/registry/match.h):
  1. op equal; dtype equal, where a quantization maps to dtypes first to last
     (fp8 -> fp8, fp16; int8, w8a8 -> int8, fp16; awq, gptq, int4, w4a16 -> fp16).
  2. only what `kiln registry verify` accepts now: verification.passed and benchmark.passed true,
     the source file present and matching source_sha256. An entry without source_sha256 (Forge's) only
     with --allow-unhashed, and the answer says so. An entry with an unknown evidence_level is skipped
     with a warning.
  3. GPU, best tier first: the exact name; one name a run of whole tokens of the other with a model
     number (H100 within "NVIDIA H100 80GB HBM3"; H20 is not within H200, A10 not within A100); the
     same chip class (H100/H200/H800/GH200 are one; the H20 is its own); any GPU when --gpu is not given.
     CPU kernels serve the same CPU model only.
  4. shape: each measured case of the entry is tried. Dimension names compare through an alias table
     (batch = B, hidden_size = H, seq_len = S; softmax: rows = batch, cols = hidden_size). Every dim the
     entry names must be in --shape and within --max-shape-ratio of it; a dim the entry does not name is
     free (Forge's rule) but ranks lower. The exact shape, then fewer free dims, then the smallest
     sum of |log(entry/asked)|.
  5. ties: the dtype asked for over a mapped one, higher evidence level, a hashed source, higher
     speedup at the fitted shape, newer created_at, smaller kernel id.)";

// The stored "kernels" array of the registry in `dir`, or the failure's exit code.
Result<nlohmann::json> stored_entries(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(registry::Registry reg, registry::Registry::open(dir));
  return reg.raw_entries();
}

void print_list_row(const nlohmann::json& j) {
  char sp[64];
  const nlohmann::json& bench = j.at("benchmark");
  double s = bench.value("speedup", 0.0);
  auto iv = j.find("speedup_interval");
  if (iv != j.end() && iv->is_array() && iv->size() == 2 && (*iv)[0].is_number() && (*iv)[1].is_number())
    std::snprintf(sp, sizeof sp, "%.2fx [%.2f, %.2f]", s, (*iv)[0].get<double>(), (*iv)[1].get<double>());
  else
    std::snprintf(sp, sizeof sp, "%.2fx", s);  // an entry without an interval (Forge's)
  std::printf("%-48s %-10s %-16s %-8s %-20s %s\n", j.value("kernel_id", "").c_str(), j.value("op", "").c_str(),
              j.value("target_gpu", "").substr(0, 16).c_str(), j.value("dtype", "").c_str(), sp,
              j.value("created_at", "").c_str());
}

}  // namespace

void add_registry_command(CLI::App& app, Common& common, RegistryCommand& r) {
  r.cmd = app.add_subcommand("registry", "the verified-kernel registry");
  r.cmd->require_subcommand(1);
  r.cmd->add_option("--dir", r.dir, "registry folder (default: promoter.registry_dir)");
  r.list = r.cmd->add_subcommand("list", "every verified kernel (--json: the entries as stored)");
  r.show = r.cmd->add_subcommand("show", "one kernel's entry, as stored");
  r.show->add_option("id", r.kernel_id, "kernel id")->required();
  r.verify = r.cmd->add_subcommand(
      "verify", "check every entry, its source file and hash (an entry without source_sha256 is a warning)");
  MatchOptions& m = r.match_options;
  r.match = r.cmd->add_subcommand(
      "match", "the best verified kernel for an op, dtype, shape and GPU, and why (the rules below, in order)");
  r.match->footer(kMatchRules);
  r.match->add_option("op", m.op, "op name, e.g. rmsnorm")->required();
  r.match->add_option("--dtype", m.dtype, "dtype or quantization, e.g. fp16, fp8, awq")->required();
  r.match->add_option("--shape", m.shape, "dims as K=V,K=V with positive integers, e.g. B=16,H=4096")->required();
  r.gpu_option =
      r.match->add_option("--gpu", m.gpu, "GPU (or CPU) name, e.g. \"NVIDIA H100\"; without it any GPU qualifies");
  r.match
      ->add_option("--max-shape-ratio", m.max_shape_ratio,
                   "no dim of the kernel's measured shape more than this factor from --shape (default 2)")
      ->check(CLI::Range(1.0, 1e12));
  r.match->add_flag("--allow-unhashed", m.allow_unhashed,
                    "also recommend entries without source_sha256 (Forge's), saying so");
  // Also accepted after the subcommand, where a user of `match` reaches for them.
  r.match->add_option("--dir", r.dir, "registry folder (default: promoter.registry_dir)");
  r.match->add_flag("--json", common.json, "machine-readable output");
}

int run_registry_command(const Common& c, RegistryCommand& r) {
  const std::string dir = r.dir.empty() ? c.config.promoter.registry_dir : r.dir;
  // A folder named on the command line must exist, and so must any registry that is verified: checking
  // nothing is not "ok". (The configured folder of a Kiln that has promoted nothing yet lists as empty.)
  std::error_code ec;
  if ((!r.dir.empty() || *r.verify) && !std::filesystem::is_directory(dir, ec))
    return fail("no registry at " + dir + ": no such folder");
  if (*r.list) return cmd_registry_list(c, dir);
  if (*r.show) return cmd_registry_show(c, dir, r.kernel_id);
  if (*r.verify) return cmd_registry_verify(c, dir);
  if (*r.match) {
    r.match_options.gpu_given = r.gpu_option->count() > 0;
    return cmd_registry_match(c, dir, r.match_options);
  }
  return 1;
}

int cmd_registry_list(const Common& c, const std::string& dir) {
  auto entries = stored_entries(dir);
  if (!entries.is_ok()) return fail(entries.status().message());
  if (c.json) {
    std::printf("%s\n", entries->dump(2).c_str());  // as stored: nothing filled in, unknown keys kept
    return 0;
  }
  if (entries->empty()) {
    std::printf("no verified kernels in %s/verified_kernels.json yet\n", dir.c_str());
    return 0;
  }
  std::printf("%-48s %-10s %-16s %-8s %-20s %s\n", "kernel_id", "op", "target", "dtype", "speedup [95% CI]", "created");
  for (const nlohmann::json& j : *entries) print_list_row(j);
  return 0;
}

int cmd_registry_show(const Common&, const std::string& dir, const std::string& id) {
  auto entries = stored_entries(dir);
  if (!entries.is_ok()) return fail(entries.status().message());
  for (const nlohmann::json& j : *entries) {
    if (j.value("kernel_id", "") != id) continue;
    std::printf("%s\n", j.dump(2).c_str());  // as stored: a Forge entry keeps skill_ids and gains nothing
    return 0;
  }
  return fail("no kernel " + id + " in " + dir);
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
  size_t n = entries.is_ok() ? entries->size() : 0, unhashed = 0;
  if (entries.is_ok())
    for (const auto& e : *entries) unhashed += e.has_source_sha256 ? 0 : 1;
  if (!c.json) {
    if (warnings.empty())
      std::printf("%s: ok (%zu kernel(s), every source present and matching its sha256)\n", dir.c_str(), n);
    else
      std::printf("%s: ok with %zu warning(s) (%zu kernel(s), every source present; %zu without source_sha256)\n",
                  dir.c_str(), warnings.size(), n, unhashed);
  }
  return 0;
}

int cmd_registry_match(const Common& c, const std::string& dir, const MatchOptions& o) {
  if (o.gpu_given && o.gpu.empty()) return fail("--gpu: expected a GPU name, got an empty string");
  registry::MatchQuery query{o.op, o.dtype, o.gpu, {}};
  std::string shape_error;
  if (!registry::parse_shape(o.shape, query.shape, shape_error)) return fail("--shape: " + shape_error);
  registry::MatchOptions options{o.max_shape_ratio, o.allow_unhashed};

  auto reg = registry::Registry::open(dir);
  if (!reg.is_ok()) return fail(reg.status().message());
  auto raw = reg->raw_entries();  // every entry already checked by the registry's reader
  if (!raw.is_ok()) return fail(dir + ": " + raw.status().message());
  registry::MatchOutcome outcome =
      raw->empty() ? registry::MatchOutcome{std::nullopt,
                                            "no " + o.op + " " + o.dtype + " kernel: " + dir + "/" +
                                                std::string(registry::kRegistryFile) + " has no kernels yet",
                                            {}}
                   : registry::match_kernel(*raw, reg->dir(), query, options);
  if (!c.json)
    for (const std::string& w : outcome.warnings) std::fprintf(stderr, "kiln: warning: %s\n", w.c_str());
  if (!outcome.match) {
    if (c.json)
      std::printf(
          "%s\n",
          nlohmann::json{{"match", nullptr}, {"error", outcome.error}, {"warnings", outcome.warnings}}.dump().c_str());
    return fail(outcome.error);
  }
  const registry::Match& m = *outcome.match;
  const nlohmann::json& entry = (*raw)[m.index];
  registry::MatchCandidate k;
  std::string read_error;
  if (!registry::read_candidate(entry, k, read_error))
    return fail("kernels[" + std::to_string(m.index) + "]." + read_error);
  k.source = registry::check_source(reg->dir(), k);
  if (c.json) {
    nlohmann::json out{{"entry", entry},
                       {"match",
                        {{"gpu_tier", registry::gpu_tier_name(m.gpu_tier)},
                         {"shape", m.shape},
                         {"shape_distance", m.shape_distance},
                         {"speedup", m.speedup},
                         {"reason", m.reason},
                         {"source_verified", k.source_verified()}}},
                       {"warnings", outcome.warnings}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  // The source path as the entry stores it: relative to the registry folder for Kiln's own entries.
  std::printf("%s\n", k.kernel_id.c_str());
  std::printf("  source   %s (%s)\n", k.source_path.c_str(),
              k.source_verified() ? "matches its source_sha256" : "no source_sha256: not checked");
  std::printf("  speedup  %.2fx at %s on %s (%s)\n", m.speedup, registry::format_shape(m.shape).c_str(),
              (k.gpu_name.empty() ? k.target_gpu : k.gpu_name).c_str(), k.evidence_level.c_str());
  std::printf("  why      %s\n", m.reason.c_str());
  return 0;
}

}  // namespace kiln::cli
