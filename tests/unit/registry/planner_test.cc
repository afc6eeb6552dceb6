// The planner recommends only what `verify` accepts and what fits: each case of issue "a registry planner
// that recommends only what is verified and fits", on hand-made candidates and on the seed's example entry.
#include <catch2/catch.hpp>
#include <fstream>

#include "kiln/core/hash.h"
#include "kiln/registry/match.h"

using kiln::registry::match_kernel;
using kiln::registry::MatchCandidate;
using kiln::registry::MatchOptions;
using kiln::registry::MatchOutcome;
using kiln::registry::MatchQuery;
using kiln::registry::MeasuredShape;
using kiln::registry::SourceCheck;
using Shape = std::map<std::string, int64_t>;

namespace {

MatchCandidate verified(const std::string& id, const std::string& gpu, const Shape& shape, double speedup = 1.5) {
  MatchCandidate c;
  c.kernel_id = id;
  c.op = "rmsnorm";
  c.dtype = "fp16";
  c.language = "cuda";
  c.source_path = "kernels/cuda/rmsnorm/" + id + ".cu";
  c.target_gpu = c.gpu_name = gpu;
  c.shape = shape;
  c.speedup = speedup;
  c.created_at = "2026-04-01T00:00:00Z";
  c.verification_passed = c.benchmark_passed = true;
  c.source_sha256 = "00";
  c.source = SourceCheck::kMatches;
  return c;
}

MatchQuery q(const std::string& gpu, const Shape& shape, const std::string& dtype = "fp16") {
  return MatchQuery{"rmsnorm", dtype, gpu, shape};
}

std::string pick(const std::vector<MatchCandidate>& cs, const MatchQuery& query, const MatchOptions& o = {}) {
  MatchOutcome out = match_kernel(cs, query, o);
  return out.match ? cs[out.match->index].kernel_id : "error: " + out.error;
}

const Shape kB16H4096{{"B", 16}, {"H", 4096}};

}  // namespace

TEST_CASE("planner: only entries that passed verification and benchmark, with their source intact",
          "[registry][planner]") {
  MatchCandidate good = verified("good", "NVIDIA H200", kB16H4096, 1.3);
  MatchCandidate failed_check = verified("failed_check", "NVIDIA H200", kB16H4096, 3.0);
  failed_check.verification_passed = false;
  MatchCandidate failed_bench = verified("failed_bench", "NVIDIA H200", kB16H4096, 3.0);
  failed_bench.benchmark_passed = false;
  MatchCandidate edited = verified("edited", "NVIDIA H200", kB16H4096, 3.0);
  edited.source = SourceCheck::kMismatch;
  MatchCandidate deleted = verified("deleted", "NVIDIA H200", kB16H4096, 3.0);
  deleted.source = SourceCheck::kMissing;
  MatchCandidate unchecked = verified("unchecked", "NVIDIA H200", kB16H4096, 3.0);
  unchecked.source = SourceCheck::kUnchecked;
  auto query = q("NVIDIA H200", kB16H4096);
  CHECK(pick({failed_check, failed_bench, edited, deleted, unchecked, good}, query) == "good");
  CHECK(pick({failed_check, failed_bench, edited}, query) ==
        "error: no rmsnorm fp16 kernel that `kiln registry verify` accepts: edited (source "
        "kernels/cuda/rmsnorm/edited.cu does not match source_sha256), failed_bench (benchmark.passed is false), "
        "failed_check (verification.passed is false)");
  CHECK(pick({deleted}, query) ==
        "error: no rmsnorm fp16 kernel that `kiln registry verify` accepts: deleted (source "
        "kernels/cuda/rmsnorm/deleted.cu is missing)");
}

TEST_CASE("planner: check_source hashes the file, so source_verified means the file matches", "[registry][planner]") {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/data/registry/example";
  const std::string id = "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1";
  MatchCandidate c = verified(id, "NVIDIA H200", kB16H4096);
  std::ifstream in(dir + "/" + c.source_path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE_FALSE(text.empty());
  c.source_sha256 = kiln::sha256_hex(text);
  CHECK(kiln::registry::check_source(dir, c) == SourceCheck::kMatches);
  c.source_sha256[0] = c.source_sha256[0] == 'a' ? 'b' : 'a';
  CHECK(kiln::registry::check_source(dir, c) == SourceCheck::kMismatch);
  c.source_path = "../example/" + c.source_path;
  CHECK(kiln::registry::check_source(dir, c) == SourceCheck::kMissing);  // outside the registry
  c.source_path = "kernels/none.cu";
  CHECK(kiln::registry::check_source(dir, c) == SourceCheck::kMissing);
  // The portable hash is SHA-256: the same as the library's on empty, short, block-sized and long inputs.
  for (size_t n : {0, 3, 55, 56, 63, 64, 65, 119, 1000})
    CHECK(kiln::registry::sha256_hex_portable(std::string(n, 'x')) == kiln::sha256_hex(std::string(n, 'x')));
}

TEST_CASE("planner: nearest shape is bounded, every measured case counts", "[registry][planner]") {
  std::vector<MatchCandidate> cs{verified("h4096", "NVIDIA H200", kB16H4096)};
  CHECK(pick(cs, q("NVIDIA H200", {{"B", 1}, {"H", 1048576}})) ==
        "error: no rmsnorm fp16 kernel that fits B=1,H=1048576 for NVIDIA H200 (closest: h4096, shape B=16,H=4096: "
        "batch=16 is more than 2x from 1)");
  CHECK(pick(cs, q("NVIDIA H200", {{"B", 16}, {"H", 8192}})) == "h4096");  // 2x is within
  CHECK(pick(cs, q("NVIDIA H200", {{"B", 16}, {"H", 8193}})).starts_with("error:"));
  MatchOptions wide;
  wide.max_shape_ratio = 300;
  CHECK(pick(cs, q("NVIDIA H200", {{"B", 1}, {"H", 1048576}}), wide) == "h4096");
  wide.max_shape_ratio = 0.5;
  CHECK(pick(cs, q("NVIDIA H200", kB16H4096), wide) ==
        "error: the shape ratio limit must be a number >= 1, got 0.500000");

  // An entry measured at two shapes fits by either, and is ranked by the case that fits, with its speedup.
  MatchCandidate two = verified("two_cases", "NVIDIA H200", kB16H4096, 1.2);
  two.cases = {MeasuredShape{kB16H4096, 1.2}, MeasuredShape{{{"B", 16}, {"H", 65536}}, 4.0}};
  MatchCandidate big = verified("big_only", "NVIDIA H200", {{"B", 16}, {"H", 65536}}, 2.0);
  MatchOutcome out = match_kernel({big, two}, q("NVIDIA H200", {{"B", 16}, {"H", 65536}}));
  REQUIRE(out.match);
  CHECK(out.match->index == 1);
  CHECK(out.match->speedup == 4.0);
  CHECK(out.match->shape == Shape{{"B", 16}, {"H", 65536}});
  CHECK(out.match->reason == "exact GPU (nvidiah200), exact shape; ahead of big_only on higher speedup");
  CHECK(pick({two}, q("NVIDIA H200", {{"B", 16}, {"H", 60000}})) == "two_cases");
}

TEST_CASE("planner: an H20 is not an H200, by name or by chip class", "[registry][planner]") {
  std::vector<MatchCandidate> cs{verified("h200", "NVIDIA H200", kB16H4096, 5.0)};
  CHECK(pick(cs, q("NVIDIA H20", kB16H4096)) ==
        "error: no rmsnorm fp16 kernel for GPU NVIDIA H20 (hopper, h20 class): there are rmsnorm fp16 kernels for "
        "NVIDIA H200 (hopper, gh100 class)");
  CHECK(pick({verified("h20", "NVIDIA H20", kB16H4096)}, q("NVIDIA H200", kB16H4096)).starts_with("error:"));
  // With an H20 kernel in the registry, the H20 gets it whatever the H200's speedup.
  cs.push_back(verified("h20", "NVIDIA H20", kB16H4096, 1.2));
  CHECK(pick(cs, q("NVIDIA H20", kB16H4096)) == "h20");
  CHECK(pick(cs, q("H20", kB16H4096)) == "h20");
  CHECK(kiln::registry::gpu_kind("NVIDIA H20").chip == "h20");
  CHECK(kiln::registry::gpu_kind("NVIDIA H200").chip == "gh100");
  CHECK(kiln::registry::gpu_name_within("H100", "NVIDIA H100 80GB HBM3"));
  CHECK(kiln::registry::gpu_name_within("nvidiah100", "NVIDIA H100 80GB HBM3"));
  CHECK(kiln::registry::gpu_name_within("RTX 4070", "NVIDIA GeForce RTX 4070 Laptop GPU"));
  CHECK(kiln::registry::gpu_name_within("geforcertx4070", "NVIDIA GeForce RTX 4070"));
  CHECK_FALSE(kiln::registry::gpu_name_within("H20", "NVIDIA H200"));
  CHECK_FALSE(kiln::registry::gpu_name_within("NVIDIA", "NVIDIA H200"));  // no model number
  CHECK_FALSE(kiln::registry::gpu_name_within("A10", "NVIDIA A100"));
}

TEST_CASE("planner: Forge's dimension names find Kiln's, and Forge's rule frees dims an entry does not name",
          "[registry][planner]") {
  std::vector<MatchCandidate> cs{verified("kiln_b16", "NVIDIA H200", kB16H4096)};
  CHECK(pick(cs, q("NVIDIA H200", {{"batch", 16}, {"hidden_size", 4096}})) == "kiln_b16");
  CHECK(match_kernel(cs, q("NVIDIA H200", {{"batch", 16}, {"hidden_size", 4096}})).match->reason ==
        "exact GPU (nvidiah200), exact shape");
  CHECK(kiln::registry::canonical_dim("rmsnorm", "B") == "batch");
  CHECK(kiln::registry::canonical_dim("softmax", "cols") == "hidden_size");
  CHECK(kiln::registry::canonical_dim("transpose", "cols") == "cols");
  CHECK(kiln::registry::canonical_dim("sgemm", "N") == "n");
  // Kiln's cuda_softmax (rows, cols) answers Forge's softmax query.
  MatchCandidate sm = verified("softmax_rows", "NVIDIA H200", {{"rows", 8192}, {"cols", 8192}});
  sm.op = "softmax";
  CHECK(
      match_kernel({sm}, MatchQuery{"softmax", "fp16", "NVIDIA H200", {{"batch", 8192}, {"hidden_size", 8192}}}).match);

  // An entry with hidden_size only fits a query that also names batch; it ranks below one naming both.
  MatchCandidate h_only = verified("h_only", "NVIDIA H200", {{"hidden_size", 4096}}, 9.0);
  CHECK(match_kernel({h_only}, q("NVIDIA H200", {{"batch", 16}, {"hidden_size", 4096}})).match->reason ==
        "exact GPU (nvidiah200), shape hidden_size=4096 for batch=16,hidden_size=4096 (dims it does not name are "
        "free: Forge's rule)");
  CHECK(pick({h_only, cs[0]}, q("NVIDIA H200", {{"batch", 16}, {"hidden_size", 4096}})) == "kiln_b16");
  CHECK(pick({h_only}, q("NVIDIA H200", {{"batch", 16}, {"hidden_size", 9000}})).starts_with("error:"));
}

TEST_CASE("planner: the seed's own example entry is matched by Forge's query", "[registry][planner]") {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/data/registry/forge_seed";
  std::ifstream in(dir + "/verified_kernels.json");
  REQUIRE(in);
  nlohmann::json doc = nlohmann::json::parse(in);
  MatchOptions allow;
  allow.allow_unhashed = true;
  MatchOutcome out =
      match_kernel(doc, dir, q("NVIDIA GeForce RTX 4070", {{"batch", 16}, {"hidden_size", 4096}}), allow);
  INFO(out.error);
  REQUIRE(out.match);
  CHECK(out.match->gpu_tier == kiln::registry::GpuTier::kExact);
  out = match_kernel(doc, dir, q("RTX 4070 Laptop GPU", {{"hidden_size", 4096}}), allow);
  REQUIRE(out.match);
  CHECK(out.match->gpu_tier == kiln::registry::GpuTier::kContains);
}

TEST_CASE("planner: an unknown evidence level is skipped with a warning", "[registry][planner]") {
  MatchCandidate gold = verified("gold", "NVIDIA H200", kB16H4096, 9.0);
  gold.evidence_level = "gold_level";
  MatchCandidate op = verified("op", "NVIDIA H200", kB16H4096);
  MatchOutcome out = match_kernel({gold, op}, q("NVIDIA H200", kB16H4096));
  REQUIRE(out.match);
  CHECK(out.match->index == 1);
  REQUIRE(out.warnings.size() == 1);
  CHECK(out.warnings[0] ==
        "skipped gold: unknown evidence level \"gold_level\" (expected op_level, runtime_level or endpoint_level)");
  out = match_kernel({gold}, q("NVIDIA H200", kB16H4096));
  CHECK(out.error == "no rmsnorm fp16 kernel that `kiln registry verify` accepts: every one was skipped");
}

TEST_CASE("planner: a quantization maps to dtypes, the exact one first", "[registry][planner]") {
  using kiln::registry::dtypes_for;
  CHECK(dtypes_for("fp8") == std::vector<std::string>{"fp8", "fp16"});
  CHECK(dtypes_for("AWQ") == std::vector<std::string>{"fp16"});
  CHECK(dtypes_for("gptq") == std::vector<std::string>{"fp16"});
  CHECK(dtypes_for("int8") == std::vector<std::string>{"int8", "fp16"});
  CHECK(dtypes_for("bf16") == std::vector<std::string>{"bf16"});
  MatchCandidate fp16 = verified("fp16", "NVIDIA H200", kB16H4096, 3.0);
  CHECK(pick({fp16}, q("NVIDIA H200", kB16H4096, "fp8")) == "fp16");
  CHECK(match_kernel({fp16}, q("NVIDIA H200", kB16H4096, "fp8")).match->reason ==
        "exact GPU (nvidiah200), exact shape, dtype fp16 for fp8");
  CHECK(pick({fp16}, q("NVIDIA H200", kB16H4096, "awq")) == "fp16");
  MatchCandidate fp8 = verified("fp8", "NVIDIA H200", kB16H4096, 1.2);
  fp8.dtype = "fp8";
  CHECK(pick({fp16, fp8}, q("NVIDIA H200", kB16H4096, "fp8")) == "fp8");
  CHECK(pick({fp8}, q("NVIDIA H200", kB16H4096, "awq")) ==
        "error: no rmsnorm kernel in dtype fp16 (for awq; it has: fp8)");
}
