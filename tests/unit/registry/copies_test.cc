// The registry does not fill with copies: a kernel that differs from a registered one only in comments or
// whitespace is a duplicate, and a "new best" inside the registered best's interval is noise, not a
// version. Replays the LLM campaign that registered v1-v4 of one softmax kernel.
#include <catch2/catch.hpp>

#include "kiln/core/files.h"
#include "kiln/registry/registry.h"

using kiln::registry::Registry;

namespace {

kiln::proto::CaseTiming timing(double speedup, double lo, double hi) {
  kiln::proto::CaseTiming t;
  t.dims = {{"rows", 8192}, {"cols", 8192}};
  t.candidate.n = t.reference.n = 40;
  t.candidate.median_us = 100;
  t.reference.median_us = 100 * speedup;
  t.speedup = speedup;
  t.speedup_lo = lo;
  t.speedup_hi = hi;
  return t;
}

// A confirmed softmax kernel at `speedup`, its 95 % interval +-0.13 around it.
kiln::proto::PromoteRequest softmax(const std::string& source, double speedup) {
  kiln::proto::PromoteRequest r;
  r.campaign_id = "softmax-llm";
  r.program_id = "softmax-llm/p0";
  r.task_name = "cuda_softmax";
  r.op = "softmax";
  r.backend = kiln::proto::Backend::kCuda;
  r.dtype = "fp32";
  r.source = source;
  r.source_ext = "cu";
  r.params = {{"BLOCK", "256"}};
  r.verification.passed = true;
  r.benchmark = r.confirmation = timing(speedup, speedup - 0.13, speedup + 0.13);
  r.worker.device_name = r.confirm_worker.device_name = "NVIDIA H200";
  return r;
}

const std::string kKernel =
    "__global__ void softmax(const float* x, float* y, int cols) {\n"
    "  int row = blockIdx.x;  // one block per row\n"
    "  const char* tag = \"a  b\";\n"
    "}\n";

}  // namespace

TEST_CASE("normalized_source drops comments and whitespace, keeps literals and directives", "[registry][copies]") {
  using kiln::registry::normalized_source;
  CHECK(normalized_source("int  a = 1; // one\n/* two */ int b;\n") == "int a=1;int b;");
  CHECK(normalized_source("int a=1;\n\n\tint b ;") == "int a=1;int b;");
  CHECK(normalized_source("const char* s = \"x  // y\";") == "const char*s=\"x  // y\";");
  CHECK(normalized_source("char c = '\"'; int d;") == "char c='\"';int d;");
  CHECK(normalized_source("#define A 1\nint x;") == "#define A 1\nint x;");
  CHECK(normalized_source("#define A 1 // a\n\n  #define B 2\nint x;") == "#define A 1\n#define B 2\nint x;");
  CHECK(normalized_source("int/**/x;") == "int x;");
  CHECK(normalized_source("int x;\n  #include <a.h>\nint y;") == "int x;\n#include<a.h>\nint y;");
  CHECK(normalized_source("a + +b") == "a+ +b");  // two tokens stay two
  CHECK(normalized_source("a + b") == "a+b");
}

TEST_CASE("comment-only copies of a kernel promote once", "[registry][copies]") {
  kiln::TempDir dir;
  auto reg = Registry::open(dir.path());
  REQUIRE(reg.is_ok());
  // Program 0 at 15.53x, then the parent's code plus a comment at 15.54x, 15.55x and 15.55x.
  auto first = reg->promote(softmax(kKernel, 15.53), 1.10);
  REQUIRE(first.is_ok());
  CHECK(*first == "cuda_softmax_nvidiah200_fp32_cols8192_rows8192_v1");
  const std::string copies[] = {
      "// Optimized: one block per row.\n" + kKernel,
      kKernel + "/* faster */\n",
      "__global__ void softmax(const float* x, float* y, int cols)\n{\n    int row = blockIdx.x;\n"
      "    const char* tag = \"a  b\";\n}\n",
  };
  const double speedups[] = {15.54, 15.55, 15.55};
  for (int i = 0; i < 3; ++i) {
    INFO(copies[i]);
    auto again = reg->promote(softmax(copies[i], speedups[i]), 1.10);
    REQUIRE_FALSE(again.is_ok());
    CHECK(again.status().code() == kiln::StatusCode::kAlreadyExists);
    CHECK(again.status().message() ==
          "duplicate of " + *first + ": the same source up to comments and whitespace, with the same parameters");
    CHECK(kiln::registry::is_refusal(again.status()));
  }
  auto all = reg->list();
  REQUIRE(all.is_ok());
  CHECK(all->size() == 1);

  // A change inside a string literal is a change.
  std::string other = kKernel;
  other.replace(other.find("a  b"), 4, "a b");
  auto changed = reg->promote(softmax(other, 15.55), 1.10);
  REQUIRE_FALSE(changed.is_ok());
  CHECK(changed.status().code() == kiln::StatusCode::kFailedPrecondition);  // new, but not faster (below)
}

TEST_CASE("a new version must be measurably faster than the registered best", "[registry][copies]") {
  kiln::TempDir dir;
  auto reg = Registry::open(dir.path());
  REQUIRE(reg.is_ok());
  REQUIRE(reg->promote(softmax(kKernel, 15.53), 1.10).is_ok());
  // Another kernel whose interval overlaps the best's [15.40, 15.66]: within noise.
  const std::string v2 = kKernel + "__device__ int unused() { return 2; }\n";
  auto noise = reg->promote(softmax(v2, 15.60), 1.10);
  REQUIRE_FALSE(noise.is_ok());
  CHECK(noise.status().message() ==
        "not measurably faster than cuda_softmax_nvidiah200_fp32_cols8192_rows8192_v1 (15.53x [15.40, 15.66]): the "
        "confirmation's interval lower bound 15.47 is not above 15.66");
  CHECK(kiln::registry::is_refusal(noise.status()));
  // Other parameters of the same file: not a duplicate, but still judged against the best.
  auto params = softmax(kKernel, 15.55);
  params.params = {{"BLOCK", "512"}};
  CHECK(reg->promote(params, 1.10).status().message().starts_with("not measurably faster than"));
  // Its lower bound above the best's upper bound: a new version.
  auto faster = reg->promote(softmax(v2, 16.00), 1.10);
  REQUIRE(faster.is_ok());
  CHECK(*faster == "cuda_softmax_nvidiah200_fp32_cols8192_rows8192_v2");
  // The bar is now v2's: 16.20 [16.07, 16.33] overlaps [15.87, 16.13].
  CHECK_FALSE(reg->promote(softmax(v2 + "int z;\n", 16.20), 1.10).is_ok());
  // Another GPU, dtype or shape is another best.
  auto h100 = softmax(v2 + "int z;\n", 12.0);
  h100.worker.device_name = h100.confirm_worker.device_name = "NVIDIA H100";
  CHECK(reg->promote(h100, 1.10).is_ok());
}

TEST_CASE("no promotion under Forge's bar of 1.10, however the registry is called", "[registry][copies]") {
  kiln::TempDir dir;
  auto reg = Registry::open(dir.path());
  REQUIRE(reg.is_ok());
  auto low = reg->promote(softmax(kKernel, 15.53), 1.05);
  REQUIRE_FALSE(low.is_ok());
  CHECK(low.status().message() == "the promotion bar 1.05 is under Forge's 1.10");
  CHECK_FALSE(reg->promote(softmax(kKernel, 15.53), 0.5).is_ok());
  CHECK(reg->promote(softmax(kKernel, 15.53), 1.10).is_ok());
}
