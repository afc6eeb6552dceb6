#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/registry/registry.h"

namespace fs = std::filesystem;
using kiln::registry::Registry;
using nlohmann::json;

namespace {

kiln::proto::CaseTiming timing(double speedup, double lo, double hi) {
  kiln::proto::CaseTiming t;
  t.dims = {{"B", 16}, {"H", 4096}};
  t.candidate.n = 40;
  t.candidate.median_us = 24.8;
  t.candidate.p10_us = 24.1;
  t.candidate.p90_us = 25.9;
  t.candidate.cv = 0.004;
  t.reference.n = 40;
  t.reference.median_us = 24.8 * speedup;
  t.speedup = speedup;
  t.speedup_lo = lo;
  t.speedup_hi = hi;
  t.warmup_iters = 3;
  return t;
}

kiln::proto::PromoteRequest good_request(const std::string& source = "__global__ void k() {}\n") {
  kiln::proto::PromoteRequest r;
  r.campaign_id = "c1";
  r.program_id = "c1/p3";
  r.task_name = "rmsnorm";
  r.op = "rmsnorm";
  r.backend = kiln::proto::Backend::kCuda;
  r.dtype = "fp16";
  r.source = source;
  r.source_ext = "cu";
  r.params = {{"BLOCK", "256"}};
  r.shape = {{"B", 16}, {"H", 4096}};
  r.verification.passed = true;
  r.verification.max_abs_error = 1e-3;
  r.verification.rtol = 1e-2;
  r.verification.atol = 1e-2;
  r.verification.tested_shapes = {"B=1,H=4096", "B=16,H=4097"};
  r.benchmark = timing(1.69, 1.60, 1.80);
  r.confirmation = timing(1.65, 1.55, 1.75);
  r.timing_method = "cuda_events";
  r.timing_mode = "cold";
  r.worker.device_name = "NVIDIA H200";
  r.worker.driver_version = "580.65";
  r.confirm_worker = r.worker;
  r.build.toolchain = "nvcc 13.0";
  return r;
}

Registry open_registry(const std::string& dir) {
  auto reg = Registry::open(dir);
  REQUIRE(reg.is_ok());
  return *reg;
}

std::string refusal(kiln::proto::PromoteRequest r, double min_speedup = 1.10) {
  kiln::TempDir dir;
  auto id = open_registry(dir.path() + "/reg").promote(r, min_speedup);
  REQUIRE_FALSE(id.is_ok());
  CHECK(kiln::registry::is_refusal(id.status()));
  CHECK_FALSE(fs::exists(dir.path() + "/reg/verified_kernels.json"));
  return id.status().message();
}

}  // namespace

TEST_CASE("kernel ids follow <language>_<op>_<gpu>_<dtype>_<shape>_v<n>", "[registry]") {
  using kiln::registry::kernel_id;
  using kiln::registry::shape_slug;
  CHECK(kernel_id("cuda", "rmsnorm", "NVIDIA H200", "fp16", {{"B", 16}, {"H", 4096}}, {}) ==
        "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1");
  CHECK(kernel_id("cuda", "rmsnorm", "NVIDIA H200", "fp16", {{"B", 16}, {"H", 4096}},
                  {"cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1", "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v2"}) ==
        "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v3");
  CHECK(kiln::registry::gpu_slug("NVIDIA GeForce RTX 4070") == "nvidiageforcertx4070");
  CHECK(kiln::registry::gpu_slug("AMD EPYC 9654 96-Core Processor") == "amdepyc965496coreprocessor");
  CHECK(kiln::registry::gpu_slug("") == "unknown");
  CHECK(shape_slug({{"hidden_size", 4096}}) == "h4096");
  CHECK(shape_slug({{"seq_len", 128}, {"batch", 16}, {"heads", 8}, {"head_dim", 64}}) == "b16_headdim64_n8_s128");
  CHECK(shape_slug({{"M", 512}, {"N", 256}, {"K", 64}}) == "k64_m512_n256");
  CHECK(shape_slug({}) == "noshape");
}

TEST_CASE("a promotion writes the source and a complete entry", "[registry]") {
  kiln::TempDir dir;
  Registry reg = open_registry(dir.path() + "/kernel_registry");
  auto empty = reg.list();
  REQUIRE(empty.is_ok());
  CHECK(empty->empty());
  CHECK(reg.verify().is_ok());

  auto r = good_request();
  auto id = reg.promote(r, 1.10);
  INFO((id.is_ok() ? std::string() : id.status().message()));
  REQUIRE(id.is_ok());
  CHECK(*id == "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1");

  std::string source_path = reg.dir() + "/kernels/cuda/rmsnorm/" + *id + ".cu";
  auto source = kiln::read_file(source_path);
  REQUIRE(source.is_ok());
  CHECK(*source == kiln::registry::effective_source(r));  // the file with its parameters baked in

  auto text = kiln::read_file(reg.dir() + "/verified_kernels.json");
  REQUIRE(text.is_ok());
  json doc = json::parse(*text);
  REQUIRE(doc["kernels"].size() == 1);
  const json& e = doc["kernels"][0];
  CHECK(e["kernel_id"] == *id);
  CHECK(e["language"] == "cuda");
  CHECK(e["source_path"] == "kernels/cuda/rmsnorm/" + *id + ".cu");
  CHECK(e["target_gpu"] == "NVIDIA H200");
  CHECK(e["shape"] == json{{"B", 16}, {"H", 4096}});
  CHECK(e["verification"]["passed"] == true);
  CHECK(e["verification"]["tolerance"]["rtol"] == 1e-2);
  CHECK(e["benchmark"]["passed"] == true);
  CHECK(e["benchmark"]["speedup"] == 1.65);  // the confirmation's numbers
  CHECK(e["benchmark"]["candidate_latency_us"] == 24.8);
  CHECK(e["benchmark"]["benchmark_iters"] == 40);
  CHECK(e["benchmark"]["warmup_iters"] == 3);
  CHECK(e["benchmark"]["gpu_name"] == "NVIDIA H200");
  CHECK(e["evidence_level"] == "op_level");
  CHECK(e["source_sha256"] == kiln::sha256_hex(kiln::registry::effective_source(r)));
  CHECK(e["campaign_id"] == "c1");
  CHECK(e["program_id"] == "c1/p3");
  CHECK(e["toolchain"] == "nvcc 13.0");
  CHECK(e["driver_version"] == "580.65");
  CHECK(e["timing"]["method"] == "cuda_events");
  CHECK(e["timing"]["mode"] == "cold");
  CHECK(e["timing"]["candidate"]["p90_us"] == 25.9);
  CHECK(e["speedup_interval"] == json::array({1.55, 1.75}));
  CHECK(e["params"]["BLOCK"] == "256");
  std::string created = e["created_at"];
  CHECK(created.size() == 20);
  CHECK(created.back() == 'Z');

  auto shown = reg.show(*id);
  REQUIRE(shown.is_ok());
  CHECK(shown->speedup_lo == Approx(1.55));
  CHECK(reg.show("nope").status().code() == kiln::StatusCode::kNotFound);
  CHECK(reg.verify().is_ok());

  // Round trip through JSON.
  auto back = kiln::registry::from_json(kiln::registry::to_json(*shown));
  REQUIRE(back.is_ok());
  CHECK(kiln::registry::to_json(*back) == kiln::registry::to_json(*shown));
  CHECK(!e.contains("baselines"));  // none were timed
}

TEST_CASE("an entry keeps what users run, timed beside the kernel: PyTorch eager, cuBLAS", "[registry]") {
  kiln::TempDir dir;
  Registry reg = open_registry(dir.path() + "/kernel_registry");
  auto r = good_request();
  kiln::proto::BaselineTiming eager;
  eager.name = "torch_eager";
  eager.stats.median_us = 49.6;
  eager.speedup = 2.0;
  eager.speedup_lo = 1.9;
  eager.speedup_hi = 2.1;
  r.confirmation.baselines.push_back(eager);
  auto id = reg.promote(r, 1.10);
  REQUIRE(id.is_ok());
  auto text = kiln::read_file(reg.dir() + "/verified_kernels.json");
  REQUIRE(text.is_ok());
  const json e = json::parse(*text)["kernels"][0];
  CHECK(e["baselines"] ==
        json::array(
            {{{"name", "torch_eager"}, {"latency_us", 49.6}, {"speedup", 2.0}, {"speedup_interval", {1.9, 2.1}}}}));
  // Forge's fields stay the task's reference's.
  CHECK(e["benchmark"]["speedup"] == 1.65);
  auto shown = reg.show(*id);
  REQUIRE(shown.is_ok());
  REQUIRE(shown->baselines.size() == 1);
  CHECK(shown->baselines[0].latency_us == Approx(49.6));
  CHECK(shown->baselines[0].speedup_hi == Approx(2.1));
  // A malformed one is refused with its path.
  json bad = e;
  bad["baselines"][0].erase("latency_us");
  auto refused = kiln::registry::from_json(bad);
  REQUIRE(!refused.is_ok());
  CHECK(refused.status().message().find("baselines[0]") != std::string::npos);
}

TEST_CASE("v<n> is bumped and duplicates are refused", "[registry]") {
  kiln::TempDir dir;
  Registry reg = open_registry(dir.path());
  auto first = reg.promote(good_request("a"), 1.10);
  REQUIRE(first.is_ok());
  auto b = good_request("b");  // measurably faster than the first: [1.80, 2.00] above [1.55, 1.75]
  b.confirmation = timing(1.9, 1.8, 2.0);
  auto second = reg.promote(b, 1.10);
  REQUIRE(second.is_ok());
  CHECK(*second == "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v2");

  auto dup = reg.promote(good_request("a"), 1.10);
  REQUIRE_FALSE(dup.is_ok());
  CHECK(dup.status().code() == kiln::StatusCode::kAlreadyExists);
  CHECK(dup.status().message() ==
        "duplicate of " + *first + ": the same source up to comments and whitespace, with the same parameters");
  CHECK(kiln::registry::is_refusal(dup.status()));

  // The same file with other template parameters is another kernel, and its copy builds as verified.
  auto other_params = good_request("a");
  other_params.confirmation = timing(2.2, 2.1, 2.3);
  other_params.params = {{"BLOCK", "512"}};
  auto r_params = reg.promote(other_params, 1.10);
  REQUIRE(r_params.is_ok());
  auto copied = kiln::read_file(dir.path() + "/kernels/cuda/rmsnorm/" + *r_params + ".cu");
  REQUIRE(copied.is_ok());
  CHECK(copied->find("#define BLOCK 512\n") != std::string::npos);
  CHECK(copied->find(other_params.source) != std::string::npos);

  // The same source on another shape or GPU is a new kernel.
  auto other_shape = good_request("a");
  other_shape.shape = {{"B", 32}, {"H", 4096}};
  auto r3 = reg.promote(other_shape, 1.10);
  REQUIRE(r3.is_ok());
  CHECK(*r3 == "cuda_rmsnorm_nvidiah200_fp16_b32_h4096_v1");
  auto cpu = good_request("a");
  cpu.backend = kiln::proto::Backend::kCpu;
  cpu.source_ext = "cpp";
  cpu.worker.device_name = cpu.confirm_worker.device_name = "AMD EPYC 9654";
  auto r4 = reg.promote(cpu, 1.10);
  REQUIRE(r4.is_ok());
  CHECK(*r4 == "cpp_rmsnorm_amdepyc9654_fp16_b16_h4096_v1");
  CHECK(fs::exists(reg.dir() + "/kernels/cpp/rmsnorm/" + *r4 + ".cpp"));
  auto all = reg.list();
  REQUIRE(all.is_ok());
  CHECK(all->size() == 5);
  CHECK(reg.verify().is_ok());
}

TEST_CASE("each promotion rule refuses with its reason", "[registry]") {
  auto r = good_request();
  r.source.clear();
  CHECK(refusal(r) == "source is missing");
  r = good_request();
  r.verification.passed = false;
  CHECK(refusal(r) == "verification did not pass");
  r = good_request();
  r.benchmark.reference.n = 0;
  CHECK(refusal(r) == "benchmark did not pass: candidate and reference were not both measured");
  r = good_request();
  r.benchmark = timing(1.05, 1.01, 1.09);
  CHECK(refusal(r) == "speedup 1.05 < 1.10");
  r = good_request();
  r.benchmark = timing(1.20, 1.04, 1.30);
  CHECK(refusal(r) == "speedup interval lower bound 1.04 < 1.10");
  r = good_request();
  r.benchmark = timing(1.20, 1.099, 1.30);
  CHECK(refusal(r) == "speedup interval lower bound 1.0990 < 1.1000");
  r = good_request();
  r.confirmation = kiln::proto::CaseTiming{};
  CHECK(refusal(r) == "no confirming measurement by a second, independent test job");
  r = good_request();
  r.confirmation = timing(1.08, 1.02, 1.12);
  CHECK(refusal(r) == "confirmation speedup 1.08 < 1.10");
  r = good_request();
  r.confirmation = timing(1.30, 1.05, 1.40);
  CHECK(refusal(r) == "confirmation speedup interval lower bound 1.05 < 1.10");
  r = good_request();
  r.confirm_worker.device_name = "NVIDIA H100";
  CHECK(refusal(r) == "confirmation ran on \"NVIDIA H100\", not on the target \"NVIDIA H200\"");
  r = good_request();
  r.benchmark = timing(1.69, 1.60, 1.80);
  CHECK(refusal(r, 2.0) == "speedup 1.69 < 2.00");
  // Malformed requests.
  r = good_request();
  r.op = "../etc";
  CHECK(refusal(r) == "op must match [a-z0-9_]+, got \"../etc\"");
  r = good_request();
  r.source_ext = "sh";
  CHECK(refusal(r) == "source_ext must be cu for backend cuda, got \"sh\"");
  r = good_request();
  r.worker.device_name.clear();
  CHECK(refusal(r) == "worker.device_name is empty: the target is unknown");
}

TEST_CASE("every benchmark case must clear the bar, and the entry lists them all", "[registry]") {
  // Two cases: fast at B=16, 2x slower at B=64.
  auto slow_case = [](double speedup, double lo, double hi) {
    kiln::proto::CaseTiming t = timing(speedup, lo, hi);
    t.dims = {{"B", 64}, {"H", 4096}};
    return t;
  };
  auto r = good_request();
  r.benchmark_cases = {r.benchmark, slow_case(0.5, 0.45, 0.55)};
  r.confirmation_cases = {r.confirmation, slow_case(0.5, 0.45, 0.55)};
  CHECK(refusal(r) == "case B=64,H=4096: speedup 0.50 < 1.10");
  r = good_request();
  r.benchmark_cases = {r.benchmark, slow_case(1.3, 1.2, 1.4)};
  r.confirmation_cases = {r.confirmation, slow_case(1.3, 1.05, 1.4)};
  CHECK(refusal(r) == "confirmation case B=64,H=4096: speedup interval lower bound 1.05 < 1.10");
  r = good_request();
  r.benchmark_cases = {r.benchmark, kiln::proto::CaseTiming{}};
  CHECK(refusal(r) == "case default was not measured");

  kiln::TempDir dir;
  Registry reg = open_registry(dir.path() + "/reg");
  r = good_request();
  r.benchmark_cases = {r.benchmark, slow_case(1.3, 1.2, 1.4)};
  r.confirmation_cases = {r.confirmation, slow_case(1.25, 1.15, 1.35)};
  auto id = reg.promote(r, 1.10);
  INFO((id.is_ok() ? std::string() : id.status().message()));
  REQUIRE(id.is_ok());
  CHECK(*id == "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1");  // the first case names the kernel
  auto entry = reg.show(*id);
  REQUIRE(entry.is_ok());
  json e = kiln::registry::to_json(*entry);
  CHECK(e["benchmark"]["speedup"] == 1.65);  // Forge's block: the first case, confirmed
  REQUIRE(e["cases"].size() == 2);
  CHECK(e["cases"][0]["dims"] == json{{"B", 16}, {"H", 4096}});
  CHECK(e["cases"][0]["speedup"] == 1.65);
  CHECK(e["cases"][1]["dims"] == json{{"B", 64}, {"H", 4096}});
  CHECK(e["cases"][1]["speedup"] == 1.25);
  CHECK(e["cases"][1]["speedup_interval"] == json::array({1.15, 1.35}));
  CHECK(e["cases"][1]["candidate_latency_us"] == 24.8);
  CHECK(e["cases"][1]["benchmark_iters"] == 40);
  auto back = kiln::registry::from_json(e);
  REQUIRE(back.is_ok());
  CHECK(kiln::registry::to_json(*back) == e);

  // An entry written before per-case numbers still reads, with none.
  json old = e;
  old.erase("cases");
  auto read = kiln::registry::from_json(old);
  REQUIRE(read.is_ok());
  CHECK(read->cases.empty());
  CHECK_FALSE(kiln::registry::to_json(*read).contains("cases"));  // shown without an invented empty list
  old["cases"] = json::array({{{"speedup", 1.2}}});
  CHECK(kiln::registry::from_json(old).status().message() == "cases[0].dims: missing (required)");
}

TEST_CASE("verify() finds tampered, missing and malformed entries", "[registry]") {
  kiln::TempDir dir;
  Registry reg = open_registry(dir.path());
  auto id = reg.promote(good_request(), 1.10);
  REQUIRE(id.is_ok());
  std::string source_path = reg.dir() + "/kernels/cuda/rmsnorm/" + *id + ".cu";

  REQUIRE(kiln::write_file_atomic(source_path, "tampered").is_ok());
  kiln::Status st = reg.verify();
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.message().find(*id + ": source kernels/cuda/rmsnorm/" + *id + ".cu does not match source_sha256") !=
        std::string::npos);

  fs::remove(source_path);
  st = reg.verify();
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.message().find("is missing") != std::string::npos);

  std::string json_path = reg.dir() + "/verified_kernels.json";
  json doc = json::parse(*kiln::read_file(json_path));
  doc["kernels"][0]["benchmark"].erase("speedup");
  REQUIRE(kiln::write_file_atomic(json_path, doc.dump()).is_ok());
  st = reg.verify();
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.message() == "verified_kernels.json: kernels[0].benchmark.speedup: missing (required)");
  // Promotion refuses to rewrite a registry it cannot read, rather than dropping entries.
  auto again = reg.promote(good_request("other"), 1.10);
  REQUIRE_FALSE(again.is_ok());
  CHECK_FALSE(kiln::registry::is_refusal(again.status()));

  REQUIRE(kiln::write_file_atomic(json_path, "{not json").is_ok());
  CHECK(reg.verify().message() == "verified_kernels.json: not valid JSON");

  // An id that does not match its fields.
  kiln::TempDir dir2;
  Registry reg2 = open_registry(dir2.path());
  auto id2 = reg2.promote(good_request(), 1.10);
  REQUIRE(id2.is_ok());
  std::string json2 = reg2.dir() + "/verified_kernels.json";
  doc = json::parse(*kiln::read_file(json2));
  doc["kernels"][0]["dtype"] = "fp32";
  REQUIRE(kiln::write_file_atomic(json2, doc.dump()).is_ok());
  st = reg2.verify();
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.message().find("id does not match its fields") != std::string::npos);
}

TEST_CASE("unknown keys in existing entries survive a rewrite", "[registry]") {
  kiln::TempDir dir;
  Registry reg = open_registry(dir.path());
  REQUIRE(reg.promote(good_request("a"), 1.10).is_ok());
  std::string json_path = reg.dir() + "/verified_kernels.json";
  json doc = json::parse(*kiln::read_file(json_path));
  doc["kernels"][0]["skill_ids"] = json::array({"inference.write-cuda-rmsnorm"});
  REQUIRE(kiln::write_file_atomic(json_path, doc.dump()).is_ok());
  auto b = good_request("b");
  b.confirmation = timing(1.9, 1.8, 2.0);
  REQUIRE(reg.promote(b, 1.10).is_ok());
  doc = json::parse(*kiln::read_file(json_path));
  REQUIRE(doc["kernels"].size() == 2);
  CHECK(doc["kernels"][0]["skill_ids"][0] == "inference.write-cuda-rmsnorm");
}

TEST_CASE("concurrent promotions get distinct ids and leave valid JSON", "[registry]") {
  kiln::TempDir dir;
  constexpr int kThreads = 6;
  std::vector<std::string> ids(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      // Each thread opens its own Registry, as separate processes would.
      auto reg = Registry::open(dir.path());
      if (!reg.is_ok()) return;
      // Each on its own shape: on one shape only a measurably faster kernel would be a new version.
      auto r = good_request("source " + std::to_string(i));
      r.shape = {{"B", 16 + i}, {"H", 4096}};
      auto id = reg->promote(r, 1.10);
      if (id.is_ok()) ids[i] = *id;
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> unique(ids.begin(), ids.end());
  CHECK(unique.size() == kThreads);
  CHECK_FALSE(unique.count(""));
  Registry reg = open_registry(dir.path());
  auto all = reg.list();
  REQUIRE(all.is_ok());
  CHECK(all->size() == kThreads);
  CHECK(reg.verify().is_ok());
}

TEST_CASE("open() rejects a file where the directory should be", "[registry]") {
  kiln::TempDir dir;
  REQUIRE(kiln::write_file_atomic(dir.path() + "/file", "x").is_ok());
  CHECK_FALSE(Registry::open(dir.path() + "/file").is_ok());
  CHECK_FALSE(Registry::open("").is_ok());
  CHECK(Registry::open("relative/dir").is_ok());
}

TEST_CASE("the entry carries each tester's measurement and their merge, and says when one device made them",
          "[registry]") {
  using Catch::Detail::Approx;
  kiln::TempDir dir;
  Registry reg = open_registry(dir.path() + "/reg");
  auto r = good_request();
  r.worker.worker_id = "tester-a";
  r.worker.host = "node1";
  r.worker.gpu_uuid = "GPU-aaaa";
  r.confirm_worker = r.worker;
  r.confirm_worker.worker_id = "tester-b";
  r.confirm_worker.gpu_uuid = "GPU-bbbb";
  // Two cases in the first measurement: its speedup is their geometric mean, its interval spans both.
  kiln::proto::CaseTiming second = timing(1.21, 1.12, 1.30);
  second.dims = {{"B", 64}, {"H", 4096}};
  r.benchmark_cases = {r.benchmark, second};
  auto id = reg.promote(r, 1.10);
  REQUIRE(id.is_ok());
  auto entry = reg.show(*id);
  REQUIRE(entry.is_ok());
  REQUIRE(entry->measurements.size() == 2);
  const auto& eval = entry->measurements[0];
  CHECK(eval.purpose == "eval");
  CHECK(eval.worker_id == "tester-a");
  CHECK(eval.host == "node1");
  CHECK(eval.device == "NVIDIA H200");
  CHECK(eval.gpu_uuid == "GPU-aaaa");
  CHECK(eval.cases == 2);
  CHECK(eval.speedup == Approx(std::sqrt(1.69 * 1.21)));
  CHECK(eval.speedup_lo == 1.12);
  CHECK(eval.speedup_hi == 1.80);
  CHECK(eval.benchmark_iters == 80);
  const auto& confirm = entry->measurements[1];
  CHECK(confirm.purpose == "confirm");
  CHECK(confirm.worker_id == "tester-b");
  CHECK(confirm.speedup == 1.65);
  CHECK(confirm.cases == 1);
  CHECK(entry->merged.testers == 2);
  CHECK(entry->merged.devices == 2);
  CHECK(entry->merged.note.empty());
  CHECK(entry->merged.speedup == Approx(std::sqrt(eval.speedup * 1.65)));
  CHECK(entry->merged.speedup_lo == 1.12);
  CHECK(entry->merged.speedup_hi == 1.80);
  json e = kiln::registry::to_json(*entry);
  CHECK(e["evidence"]["measurements"][1]["speedup_interval"] == json::array({1.55, 1.75}));
  CHECK(e["evidence"]["merged"]["testers"] == 2);
  auto back = kiln::registry::from_json(e);
  REQUIRE(back.is_ok());
  CHECK(kiln::registry::to_json(*back) == e);

  // Devices are told apart by GPU uuid, else by host and model: two CPU testers on one host share one.
  std::vector<kiln::registry::Measurement> ms = entry->measurements;
  ms[0].gpu_uuid = ms[1].gpu_uuid = "";
  auto merged = kiln::registry::merge_measurements(ms);
  CHECK(merged.testers == 2);
  CHECK(merged.devices == 1);
  CHECK(merged.note == "one device: 2 testers shared one device for all 2 measurements");
  ms[1].worker_id = ms[0].worker_id;
  CHECK(kiln::registry::merge_measurements(ms).note ==
        "one device: one tester on one device made all 2 measurements (no other tester of that device model was "
        "connected)");
  ms[1].host = "node2";
  CHECK(kiln::registry::merge_measurements(ms).devices == 2);
  CHECK(kiln::registry::merge_measurements({}).testers == 0);

  // Older and Forge entries have no evidence block; a malformed one is named.
  json old = e;
  old.erase("evidence");
  auto read = kiln::registry::from_json(old);
  REQUIRE(read.is_ok());
  CHECK(read->measurements.empty());
  CHECK_FALSE(kiln::registry::to_json(*read).contains("evidence"));
  old["evidence"] = {{"measurements", json::array({{{"purpose", "eval"}}})}, {"merged", json::object()}};
  CHECK(kiln::registry::from_json(old).status().message() == "evidence.measurements[0].worker_id: missing (required)");
}
