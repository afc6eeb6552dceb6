// The planner of kiln/registry/match.h: GPU tiers, nearest shape, ties and the errors when nothing fits.
#include "kiln/registry/match.h"

#include <catch2/catch.hpp>
#include <algorithm>
#include <fstream>
#include <sstream>

using kiln::registry::GpuTier;
using kiln::registry::match_kernel;
using kiln::registry::MatchCandidate;
using kiln::registry::MatchOutcome;
using kiln::registry::MatchQuery;
using Shape = std::map<std::string, int64_t>;

namespace {

MatchCandidate cand(const std::string& id, const std::string& gpu, const Shape& shape, double speedup = 1.5) {
  MatchCandidate c;
  c.kernel_id = id;
  c.op = "rmsnorm";
  c.dtype = "fp16";
  c.language = "cuda";
  c.source_path = "kernels/cuda/rmsnorm/" + id + ".cu";
  c.target_gpu = gpu;
  c.gpu_name = gpu;
  c.shape = shape;
  c.speedup = speedup;
  c.created_at = "2026-04-01T00:00:00Z";
  c.verification_passed = c.benchmark_passed = true;
  c.source_sha256 = "00";
  c.source = kiln::registry::SourceCheck::kMatches;
  return c;
}

MatchQuery query(const std::string& gpu, const Shape& shape, const std::string& op = "rmsnorm",
                 const std::string& dtype = "fp16") {
  return MatchQuery{op, dtype, gpu, shape};
}

// The chosen kernel id, or "error: <text>".
std::string pick(const std::vector<MatchCandidate>& cs, const MatchQuery& q) {
  MatchOutcome out = match_kernel(cs, q);
  if (!out.match) return "error: " + out.error;
  CHECK(out.error.empty());
  return cs[out.match->index].kernel_id;
}

const Shape kB16H4096{{"B", 16}, {"H", 4096}};

}  // namespace

TEST_CASE("match: the exact GPU and shape win, by target_gpu or benchmark.gpu_name", "[registry][match]") {
  std::vector<MatchCandidate> cs{cand("h100", "NVIDIA H100", kB16H4096, 3.0), cand("h200", "NVIDIA H200", kB16H4096)};
  MatchOutcome out = match_kernel(cs, query("NVIDIA H200", kB16H4096));
  REQUIRE(out.match);
  CHECK(cs[out.match->index].kernel_id == "h200");
  CHECK(out.match->gpu_tier == GpuTier::kExact);
  CHECK(out.match->shape_distance == 0);
  CHECK(out.match->reason == "exact GPU (nvidiah200), exact shape");
  // Slugs compare, so spelling and punctuation do not matter.
  CHECK(pick(cs, query("nvidia-h200", kB16H4096)) == "h200");

  // Forge writes a short target_gpu and the full device name under benchmark.gpu_name: either is exact.
  MatchCandidate forge = cand("rtx", "RTX 4070", kB16H4096);
  forge.gpu_name = "NVIDIA GeForce RTX 4070";
  CHECK(match_kernel({forge}, query("NVIDIA GeForce RTX 4070", kB16H4096)).match->gpu_tier == GpuTier::kExact);
  CHECK(match_kernel({forge}, query("RTX 4070", kB16H4096)).match->gpu_tier == GpuTier::kExact);

  // Dimension keys compare lowercased.
  CHECK(match_kernel(cs, query("NVIDIA H200", {{"b", 16}, {"h", 4096}})).match->reason ==
        "exact GPU (nvidiah200), exact shape");
}

TEST_CASE("match: Forge's rule, one GPU slug contained in the other, ranks below exact", "[registry][match]") {
  std::vector<MatchCandidate> cs{cand("hbm3", "NVIDIA H100 80GB HBM3", kB16H4096, 3.0)};
  MatchOutcome out = match_kernel(cs, query("H100", kB16H4096));
  REQUIRE(out.match);
  CHECK(out.match->gpu_tier == GpuTier::kContains);
  CHECK(out.match->reason == "GPU name h100 within nvidiah10080gbhbm3, exact shape");
  // The other way round: the kernel's name inside the query's.
  MatchCandidate short_name = cand("short", "RTX 4070", kB16H4096);
  short_name.gpu_name.clear();
  out = match_kernel({short_name}, query("NVIDIA GeForce RTX 4070 Laptop GPU", kB16H4096));
  REQUIRE(out.match);
  CHECK(out.match->gpu_tier == GpuTier::kContains);
  CHECK(out.match->reason == "GPU name rtx4070 within nvidiageforcertx4070laptopgpu, exact shape");

  // An exact name beats a contained one whatever the speedups.
  cs.push_back(cand("exact", "H100", kB16H4096, 1.2));
  CHECK(pick(cs, query("H100", kB16H4096)) == "exact");
  // A contained name beats the same architecture.
  std::vector<MatchCandidate> arch{cand("h200", "NVIDIA H200", kB16H4096, 5.0), cs[0]};
  CHECK(pick(arch, query("H100", kB16H4096)) == "hbm3");
  // Whole tokens only: a shorter model name does not capture a longer one ("a10" is not within "a100").
  std::vector<MatchCandidate> a10{cand("a100", "NVIDIA A100", kB16H4096, 2.0)};
  CHECK_FALSE(match_kernel(a10, query("A10", kB16H4096)).match);
  a10.push_back(cand("a10", "NVIDIA A10", kB16H4096, 1.2));
  CHECK(pick(a10, query("NVIDIA A10", kB16H4096)) == "a10");
}

TEST_CASE("match: the same architecture when no name matches", "[registry][match]") {
  std::vector<MatchCandidate> cs{cand("h200", "NVIDIA H200", kB16H4096), cand("l4", "NVIDIA L4", kB16H4096, 4.0)};
  MatchOutcome out = match_kernel(cs, query("NVIDIA H100 PCIe", kB16H4096));
  REQUIRE(out.match);
  CHECK(cs[out.match->index].kernel_id == "h200");
  CHECK(out.match->gpu_tier == GpuTier::kSameArchitecture);
  CHECK(out.match->reason ==
        "same architecture (hopper, gh100 class) as NVIDIA H100 PCIe: measured on NVIDIA H200, exact shape");
  CHECK(pick(cs, query("NVIDIA L4 24GB", kB16H4096)) == "l4");  // contains
  // Same family, another chip class: an RTX 4090 (AD102) does not take the L4's (AD104) kernel.
  CHECK(pick(cs, query("NVIDIA GeForce RTX 4090", kB16H4096)).starts_with("error: no rmsnorm fp16 kernel for GPU"));

  // A name the table does not know matches only by name.
  CHECK(pick(cs, query("Radeon Instinct MI300X", kB16H4096)) ==
        "error: no rmsnorm fp16 kernel for GPU Radeon Instinct MI300X (unknown architecture): there are rmsnorm "
        "fp16 kernels for NVIDIA H200 (hopper, gh100 class), NVIDIA L4 (ada, ad104 class)");
  // Without --gpu every entry qualifies, at the lowest tier; the speedup then decides.
  out = match_kernel(cs, query("", kB16H4096));
  REQUIRE(out.match);
  CHECK(cs[out.match->index].kernel_id == "l4");
  CHECK(out.match->gpu_tier == GpuTier::kAnyGpu);
  CHECK(out.match->reason ==
        "any GPU (none asked for): measured on NVIDIA L4, exact shape; ahead of h200 on higher speedup");
}

TEST_CASE("match: CPU kernels serve the same CPU model only", "[registry][match]") {
  MatchCandidate cpu = cand("epyc", "AMD EPYC 9654 96-Core Processor", kB16H4096);
  cpu.language = "cpp";
  CHECK(pick({cpu}, query("AMD EPYC 9654 96-Core Processor", kB16H4096)) == "epyc");
  // Built with -march=native: a name merely contained in the model is not enough.
  CHECK(pick({cpu}, query("AMD EPYC 9654", kB16H4096))
            .starts_with("error: no rmsnorm fp16 kernel for GPU AMD EPYC 9654"));
  CHECK(pick({cpu}, query("", kB16H4096)) == "epyc");
}

TEST_CASE("gpu_architecture: a table of known names, tokens not substrings", "[registry][match]") {
  using kiln::registry::gpu_architecture;
  CHECK(gpu_architecture("NVIDIA H100 80GB HBM3") == "hopper");
  CHECK(gpu_architecture("NVIDIA H200") == "hopper");
  CHECK(gpu_architecture("NVIDIA GH200 480GB") == "hopper");
  CHECK(gpu_architecture("nvidiah100") == "hopper");  // a slug
  CHECK(gpu_architecture("NVIDIA A100-SXM4-40GB") == "ampere");
  CHECK(gpu_architecture("NVIDIA A10G") == "ampere");
  CHECK(gpu_architecture("NVIDIA A10") == "ampere");
  CHECK(gpu_architecture("NVIDIA A40") == "ampere");
  CHECK(gpu_architecture("NVIDIA GeForce RTX 3090 Ti") == "ampere");
  CHECK(gpu_architecture("NVIDIA L4") == "ada");
  CHECK(gpu_architecture("NVIDIA L40S") == "ada");
  CHECK(gpu_architecture("RTX 4070") == "ada");
  CHECK(gpu_architecture("geforcertx4090") == "ada");
  CHECK(gpu_architecture("NVIDIA RTX 6000 Ada Generation") == "ada");
  CHECK(gpu_architecture("NVIDIA B200") == "blackwell");
  CHECK(gpu_architecture("NVIDIA GB200") == "blackwell");
  CHECK(gpu_architecture("NVIDIA GeForce RTX 5090") == "blackwell");
  CHECK(gpu_architecture("Tesla V100-SXM2-16GB") == "volta");
  CHECK(gpu_architecture("Tesla T4") == "turing");
  CHECK(gpu_architecture("NVIDIA GeForce RTX 2080 Ti") == "turing");
  CHECK(gpu_architecture("AMD Instinct MI300X").empty());
  CHECK(gpu_architecture("AMD EPYC 9654 96-Core Processor").empty());
  CHECK(gpu_architecture("NVIDIA A1000").empty());  // not "a100"
  CHECK(gpu_architecture("").empty());
}

TEST_CASE("match: the nearest shape with the same dimension keys", "[registry][match]") {
  std::vector<MatchCandidate> cs{cand("h1024", "NVIDIA H200", {{"B", 16}, {"H", 1024}}, 3.0),
                                 cand("h4096", "NVIDIA H200", kB16H4096),
                                 cand("h8192", "NVIDIA H200", {{"B", 16}, {"H", 8192}}, 2.0),
                                 cand("other_dims", "NVIDIA H200", {{"hidden_size", 5000}}, 9.0)};
  MatchOutcome out = match_kernel(cs, query("NVIDIA H200", {{"B", 16}, {"H", 5000}}));
  REQUIRE(out.match);
  CHECK(cs[out.match->index].kernel_id == "h4096");
  CHECK(out.match->shape_distance == Approx(std::log(5000.0 / 4096.0)));
  CHECK(out.match->reason == "exact GPU (nvidiah200), nearest shape B=16,H=4096 for B=16,H=5000");
  CHECK(pick(cs, query("NVIDIA H200", {{"B", 16}, {"H", 7000}})) == "h8192");
  CHECK(pick(cs, query("NVIDIA H200", {{"B", 8}, {"H", 1024}})) == "h1024");
  // An entry that names a dim the query does not is never "near"; hidden_size is H (the alias table).
  CHECK(pick(cs, query("NVIDIA H200", {{"hidden_size", 5000}})) == "other_dims");

  // The GPU tier comes first: an exact GPU with a near shape beats the same architecture with the exact one.
  std::vector<MatchCandidate> tiers{cand("h100_exact_shape", "NVIDIA H100", {{"B", 16}, {"H", 5000}}),
                                    cand("h200_near_shape", "NVIDIA H200", kB16H4096)};
  CHECK(pick(tiers, query("NVIDIA H200", {{"B", 16}, {"H", 5000}})) == "h200_near_shape");
}

TEST_CASE("match: ties go to evidence, a hashed source, speedup, then the newest", "[registry][match]") {
  MatchCandidate op = cand("op_fast", "NVIDIA H200", kB16H4096, 2.5);
  MatchCandidate runtime = cand("runtime_slow", "NVIDIA H200", kB16H4096, 1.2);
  runtime.evidence_level = "runtime_level";
  MatchCandidate endpoint = cand("endpoint", "NVIDIA H200", kB16H4096, 1.1);
  endpoint.evidence_level = "endpoint_level";
  auto q = query("NVIDIA H200", kB16H4096);
  CHECK(pick({op, runtime}, q) == "runtime_slow");
  CHECK(pick({runtime, op}, q) == "runtime_slow");  // the file's order does not matter
  CHECK(pick({op, runtime, endpoint}, q) == "endpoint");
  CHECK(match_kernel({op, runtime}, q).match->reason ==
        "exact GPU (nvidiah200), exact shape; ahead of op_fast on higher evidence level");

  MatchCandidate unhashed = cand("unhashed_fast", "NVIDIA H200", kB16H4096, 3.0);
  unhashed.source_sha256.clear();
  unhashed.source = kiln::registry::SourceCheck::kUnhashed;
  CHECK(pick({unhashed}, q).starts_with("error: no rmsnorm fp16 kernel that `kiln registry verify` accepts"));
  kiln::registry::MatchOptions allow;
  allow.allow_unhashed = true;
  CHECK(kiln::registry::match_kernel({unhashed, op}, q, allow).match->index == 1);
  CHECK(match_kernel({unhashed, op}, q, allow).match->reason ==
        "exact GPU (nvidiah200), exact shape; ahead of unhashed_fast on a hashed source");

  MatchCandidate slower = cand("slower", "NVIDIA H200", kB16H4096, 1.4);
  CHECK(pick({slower, op}, q) == "op_fast");
  MatchCandidate newer = cand("newer", "NVIDIA H200", kB16H4096, 2.5);
  newer.created_at = "2026-05-01T00:00:00Z";
  CHECK(pick({op, newer}, q) == "newer");
  CHECK(match_kernel({op, newer}, q).match->reason ==
        "exact GPU (nvidiah200), exact shape; ahead of op_fast on a newer created_at");
  MatchCandidate twin = cand("a_twin", "NVIDIA H200", kB16H4096, 2.5);
  CHECK(pick({op, twin}, q) == "a_twin");
  CHECK(pick({twin, op}, q) == "a_twin");

  // Equal distances on either side (2048 and 8192 around 4096) are a tie that evidence breaks.
  MatchCandidate below = cand("below", "NVIDIA H200", {{"B", 16}, {"H", 2048}}, 3.0);
  MatchCandidate above = cand("above", "NVIDIA H200", {{"B", 16}, {"H", 8192}}, 1.2);
  above.evidence_level = "runtime_level";
  CHECK(pick({below, above}, q) == "above");
  CHECK(pick({above, below}, q) == "above");
}

TEST_CASE("match: nothing fits, and the error says where the candidates ran out", "[registry][match]") {
  std::vector<MatchCandidate> cs{cand("h200", "NVIDIA H200", kB16H4096)};
  MatchCandidate fp32 = cand("fp32", "NVIDIA H200", kB16H4096);
  fp32.dtype = "fp32";
  MatchCandidate ln = cand("ln", "NVIDIA H200", {{"hidden_size", 4096}});
  ln.op = "layernorm";
  cs.push_back(fp32);
  cs.push_back(ln);
  CHECK(pick({}, query("NVIDIA H200", kB16H4096)) == "error: no rmsnorm fp16 kernel: the registry is empty");
  CHECK(pick(cs, query("NVIDIA H200", kB16H4096, "softmax")) ==
        "error: no kernel for op softmax (the registry has: layernorm, rmsnorm)");
  CHECK(pick(cs, query("NVIDIA H200", kB16H4096, "rmsnorm", "bf16")) ==
        "error: no rmsnorm kernel in dtype bf16 (it has: fp16, fp32)");
  CHECK(pick(cs, query("Tesla T4", kB16H4096)) ==
        "error: no rmsnorm fp16 kernel for GPU Tesla T4 (turing, tu104 class): there are rmsnorm fp16 kernels for "
        "NVIDIA H200 (hopper, gh100 class)");
  CHECK(pick(cs, query("NVIDIA H200", {{"M", 4}, {"N", 8}})) ==
        "error: no rmsnorm fp16 kernel that fits M=4,N=8 for NVIDIA H200 (closest: h200, shape B=16,H=4096: it names "
        "batch, which the query does not)");
  CHECK(pick(cs, query("", {{"B", 16}})) ==
        "error: no rmsnorm fp16 kernel that fits B=16 (closest: h200, shape B=16,H=4096: it names hidden_size, which "
        "the query does not)");
  CHECK(pick(cs, query("--", kB16H4096)) == "error: GPU name \"--\" has no letters or digits");
}

TEST_CASE("parse_shape is strict", "[registry][match]") {
  using kiln::registry::parse_shape;
  Shape s;
  std::string error;
  REQUIRE(parse_shape("B=16,H=4096", s, error));
  CHECK(s == kB16H4096);
  REQUIRE(parse_shape("hidden_size=4096", s, error));
  CHECK(s == Shape{{"hidden_size", 4096}});
  struct Bad {
    const char* text;
    const char* error;
  } bad[] = {
      {"", "expected K=V[,K=V...], got an empty string"},
      {"B", "\"B\": expected K=V with V a positive integer"},
      {"B=", "\"B=\": expected a positive integer after 'B=', got \"\""},
      {"B=0", "\"B=0\": expected a positive integer after 'B=', got \"0\""},
      {"B=-4", "\"B=-4\": expected a positive integer after 'B=', got \"-4\""},
      {"B=1.5", "\"B=1.5\": expected a positive integer after 'B=', got \"1.5\""},
      {"H=abc", "\"H=abc\": expected a positive integer after 'H=', got \"abc\""},
      {"B=+4", "\"B=+4\": expected a positive integer after 'B=', got \"+4\""},
      {"B=99999999999999999999",
       "\"B=99999999999999999999\": expected a positive integer after 'B=', got "
       "\"99999999999999999999\""},
      {"B=16,", "\"\": expected K=V with V a positive integer"},
      {"B=16,,H=2", "\"\": expected K=V with V a positive integer"},
      {"=16", "\"=16\": expected a dimension name ([A-Za-z_][A-Za-z0-9_]*) before '='"},
      {"1B=16", "\"1B=16\": expected a dimension name ([A-Za-z_][A-Za-z0-9_]*) before '='"},
      {"B =16", "\"B =16\": expected a dimension name ([A-Za-z_][A-Za-z0-9_]*) before '='"},
      {"B=16,b=2", "\"b=2\": dimension b given twice"},
  };
  for (const Bad& b : bad) {
    INFO(b.text);
    CHECK_FALSE(parse_shape(b.text, s, error));
    CHECK(error == b.error);
  }
}

TEST_CASE("evidence levels: three known, anything else named as unknown", "[registry][match]") {
  using kiln::registry::evidence_rank;
  CHECK(evidence_rank("op_level") == 0);
  CHECK(evidence_rank("runtime_level") == 1);
  CHECK(evidence_rank("endpoint_level") == 2);
  CHECK(evidence_rank("gold_level") == -1);
  CHECK(kiln::registry::evidence_level_error("runtime_level").empty());
  CHECK(kiln::registry::evidence_level_error("gold_level") ==
        "unknown evidence level \"gold_level\" (expected op_level, runtime_level or endpoint_level)");
}

TEST_CASE("match_kernel reads a registry document, checks its sources and names an entry it cannot read",
          "[registry][match]") {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/data/registry/example";
  std::ifstream in(dir + "/verified_kernels.json");
  REQUIRE(in);
  nlohmann::json doc = nlohmann::json::parse(in);

  // The Forge-style entry (no source_sha256, language triton) is read; it is recommended only when
  // unhashed entries are allowed.
  MatchCandidate forge;
  std::string error;
  REQUIRE(kiln::registry::read_candidate(doc["kernels"][0], forge, error));
  CHECK(forge.kernel_id == "triton_layernorm_a10g_fp16_b8_h2048_v1");
  CHECK(kiln::registry::check_source(dir, forge) == kiln::registry::SourceCheck::kUnhashed);
  kiln::registry::MatchOptions allow;
  allow.allow_unhashed = true;
  auto ln = query("A10G", {{"batch", 8}, {"hidden_size", 2048}}, "layernorm");
  CHECK(match_kernel(doc, dir, ln).error ==
        "no layernorm fp16 kernel that `kiln registry verify` accepts: triton_layernorm_a10g_fp16_b8_h2048_v1 (no "
        "source_sha256; --allow-unhashed accepts it)");
  MatchOutcome out = match_kernel(doc, dir, ln, allow);
  REQUIRE(out.match);
  CHECK(out.match->index == 0);
  CHECK(out.match->reason == "exact GPU (a10g), exact shape, unhashed source (allowed)");
  REQUIRE(out.warnings.size() == 1);
  CHECK(out.warnings[0].starts_with("triton_layernorm_a10g_fp16_b8_h2048_v1 has no source_sha256"));
  out = match_kernel(doc, dir, query("NVIDIA A10", {{"batch", 8}, {"hidden_size", 3000}}, "layernorm"), allow);
  REQUIRE(out.match);
  CHECK(out.match->gpu_tier == GpuTier::kSameArchitecture);

  out = match_kernel(doc["kernels"], dir, query("NVIDIA H200", kB16H4096));  // the bare array works too
  REQUIRE(out.match);
  CHECK(doc["kernels"][out.match->index]["kernel_id"] == "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1");
  // Sources are read relative to the registry folder: elsewhere they are missing, and nothing is recommended.
  CHECK(match_kernel(doc, dir + "/kernels", query("NVIDIA H200", kB16H4096)).error.find("is missing") !=
        std::string::npos);

  doc["kernels"][1].erase("evidence_level");
  CHECK(match_kernel(doc, dir, query("NVIDIA H200", kB16H4096)).error ==
        "kernels[1].evidence_level: missing (required)");
  doc["kernels"][1]["shape"]["B"] = "16";
  doc["kernels"][1]["evidence_level"] = "op_level";
  CHECK(match_kernel(doc, dir, query("NVIDIA H200", kB16H4096)).error == "kernels[1].shape.B: expected an integer");
  CHECK(match_kernel(nlohmann::json{{"entries", 1}}, dir, query("x", {})).error == "expected {\"kernels\": [...]}");
}
