// Entries written by Forge: no source_sha256, language triton, keys Kiln does not know (skill_ids). They
// load, are marked as lower evidence, verify with one warning each, and survive Kiln's rewrites untouched.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "kiln/core/files.h"
#include "kiln/registry/registry.h"

namespace fs = std::filesystem;
using kiln::registry::Registry;
using nlohmann::json;

namespace {

const std::string kExample = std::string(KILN_SOURCE_DIR) + "/tests/data/registry/example";
const std::string kForgeId = "triton_layernorm_a10g_fp16_b8_h2048_v1";

// A writable copy of the example registry.
std::string copy_example(const kiln::TempDir& dir) {
  std::string to = dir.path() + "/registry";
  fs::copy(kExample, to, fs::copy_options::recursive);
  return to;
}

json read_json(const std::string& path) {
  auto text = kiln::read_file(path);
  REQUIRE(text.is_ok());
  return json::parse(*text);
}

kiln::proto::PromoteRequest promotable() {
  kiln::proto::PromoteRequest r;
  r.campaign_id = "c9";
  r.program_id = "c9/p1";
  r.task_name = r.op = "rmsnorm";
  r.backend = kiln::proto::Backend::kCuda;
  r.dtype = "fp16";
  r.source = "__global__ void k() {}\n";
  r.source_ext = "cu";
  r.shape = {{"B", 32}, {"H", 4096}};
  r.verification.passed = true;
  for (kiln::proto::CaseTiming* t : {&r.benchmark, &r.confirmation}) {
    t->candidate.n = t->reference.n = 20;
    t->candidate.median_us = 10;
    t->reference.median_us = 15;
    t->speedup = 1.5;
    t->speedup_lo = 1.4;
    t->speedup_hi = 1.6;
  }
  r.worker.device_name = r.confirm_worker.device_name = "NVIDIA H200";
  return r;
}

}  // namespace

TEST_CASE("a Forge entry without source_sha256 loads, marked as unhashed", "[registry][forge]") {
  auto reg = Registry::open(kExample);
  REQUIRE(reg.is_ok());
  auto entries = reg->list();
  INFO((entries.is_ok() ? std::string() : entries.status().message()));
  REQUIRE(entries.is_ok());
  REQUIRE(entries->size() == 3);
  const auto& forge = entries->front();
  CHECK(forge.kernel_id == kForgeId);
  CHECK(forge.language == "triton");
  CHECK(forge.shape == std::map<std::string, int64_t>{{"batch", 8}, {"hidden_size", 2048}});
  CHECK(forge.benchmark.gpu_name == "NVIDIA A10G");
  CHECK(forge.evidence_level == "op_level");
  CHECK(forge.source_sha256.empty());
  CHECK_FALSE(forge.has_source_sha256);
  CHECK((*entries)[1].has_source_sha256);
  // Shown without an invented empty hash; the round trip keeps the mark.
  json shown = kiln::registry::to_json(forge);
  CHECK_FALSE(shown.contains("source_sha256"));
  auto back = kiln::registry::from_json(shown);
  REQUIRE(back.is_ok());
  CHECK_FALSE(back->has_source_sha256);
  // Keys Kiln does not know stay in the stored entry.
  auto raw = reg->raw_entries();
  REQUIRE(raw.is_ok());
  CHECK((*raw)[0]["skill_ids"].size() == 2);
  CHECK_FALSE((*raw)[0].contains("source_sha256"));
}

TEST_CASE("verify warns once per entry without source_sha256, naming the field", "[registry][forge]") {
  auto reg = Registry::open(kExample);
  REQUIRE(reg.is_ok());
  std::vector<std::string> warnings;
  kiln::Status st = reg->verify(&warnings);
  INFO(st.message());
  CHECK(st.is_ok());  // a warning, not a failure: the entry is well-formed by Forge's schema
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == kForgeId + ": no source_sha256: kernels/triton/layernorm/" + kForgeId +
                           ".py cannot be checked against the kernel that was measured (ranked below hashed entries)");
  CHECK(reg->verify().is_ok());

  // Its source must still be there: a missing file is a failure, and the warning is still given.
  kiln::TempDir dir;
  std::string copy = copy_example(dir);
  fs::remove(copy + "/kernels/triton/layernorm/" + kForgeId + ".py");
  auto reg2 = Registry::open(copy);
  REQUIRE(reg2.is_ok());
  warnings.clear();
  st = reg2->verify(&warnings);
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.message() ==
        "1 problem(s): " + kForgeId + ": source kernels/triton/layernorm/" + kForgeId + ".py is missing");
  CHECK(warnings.size() == 1);
}

TEST_CASE("a promotion beside a Forge entry leaves it as Forge wrote it", "[registry][forge]") {
  kiln::TempDir dir;
  std::string copy = copy_example(dir);
  json before = read_json(copy + "/verified_kernels.json");
  auto reg = Registry::open(copy);
  REQUIRE(reg.is_ok());
  auto id = reg->promote(promotable(), 1.10);
  INFO((id.is_ok() ? std::string() : id.status().message()));
  REQUIRE(id.is_ok());
  json after = read_json(copy + "/verified_kernels.json");
  REQUIRE(after["kernels"].size() == 4);
  CHECK(after["kernels"][0] == before["kernels"][0]);  // no source_sha256 invented, skill_ids kept
  CHECK(after["kernels"][3]["source_sha256"].is_string());
  CHECK(reg->verify().is_ok());
}

TEST_CASE("all three evidence levels load, and an unknown one loads with a warning", "[registry][forge]") {
  kiln::TempDir dir;
  std::string copy = copy_example(dir);
  std::string path = copy + "/verified_kernels.json";
  json doc = read_json(path);
  doc["kernels"][0]["evidence_level"] = "runtime_level";
  doc["kernels"][1]["evidence_level"] = "endpoint_level";
  REQUIRE(kiln::write_file_atomic(path, doc.dump()).is_ok());
  auto reg = Registry::open(copy);
  REQUIRE(reg.is_ok());
  auto entries = reg->list();
  REQUIRE(entries.is_ok());
  CHECK((*entries)[0].evidence_level == "runtime_level");
  CHECK((*entries)[1].evidence_level == "endpoint_level");
  CHECK((*entries)[2].evidence_level == "op_level");

  // A level this version does not know loads (Forge adds levels without schema churn): verify() warns,
  // and a promotion beside it keeps it as written.
  doc["kernels"][2]["evidence_level"] = "production_level";
  REQUIRE(kiln::write_file_atomic(path, doc.dump()).is_ok());
  entries = reg->list();
  INFO((entries.is_ok() ? std::string() : entries.status().message()));
  REQUIRE(entries.is_ok());
  CHECK((*entries)[2].evidence_level == "production_level");
  std::vector<std::string> warnings;
  CHECK(reg->verify(&warnings).is_ok());
  CHECK(std::find(warnings.begin(), warnings.end(),
                  "cpp_rmsnorm_amdepyc965496coreprocessor_fp32_b16_h4096_v1: evidence_level: unknown evidence level "
                  "\"production_level\" (expected op_level, runtime_level or endpoint_level); `kiln registry match` "
                  "skips it") != warnings.end());
  REQUIRE(reg->promote(promotable(), 1.10).is_ok());
  CHECK(read_json(path)["kernels"][2]["evidence_level"] == "production_level");
}
