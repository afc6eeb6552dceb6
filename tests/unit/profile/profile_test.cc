#include <catch2/catch.hpp>

#include "kiln/core/files.h"
#include "kiln/cuda/profile.h"

using kiln::cuda::parse_ncu_csv;

namespace {

std::string fixture() {
  // What ncu 2025.3 wrote over kiln-eval-cuda on an H200 (--page raw, trimmed to the columns Kiln reads
  // and a few others): the candidate runner is process 588, the reference's 589.
  auto text = kiln::read_file(std::string(KILN_SOURCE_DIR) + "/tests/data/ncu/softmax_raw.csv");
  REQUIRE(text.is_ok());
  return *text;
}

// A header and units row with the metrics Kiln asks for, then one row per (pid, duration ns, dram %, sm %).
std::string synthetic(const std::vector<std::tuple<int, double, double, double>>& rows) {
  std::string csv =
      "\"ID\",\"Process ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"dram__throughput.avg.pct_of_peak_sustained_"
      "elapsed\",\"sm__throughput.avg.pct_of_peak_sustained_elapsed\",\"launch__registers_per_thread\"\n"
      "\"\",\"\",\"\",\"ns\",\"%\",\"%\",\"register/thread\"\n";
  int id = 0;
  for (const auto& [pid, ns, dram, sm] : rows)
    csv += "\"" + std::to_string(id++) + "\",\"" + std::to_string(pid) + "\",\"k(int, \"\"q\"\")\",\"" +
           std::to_string(ns) + "\",\"" + std::to_string(dram) + "\",\"" + std::to_string(sm) + "\",\"32\"\n";
  return csv;
}

}  // namespace

TEST_CASE("ncu's CSV: the candidate's process only, ncu's own lines and the units row skipped", "[profile]") {
  auto p = parse_ncu_csv(fixture(), 588);
  REQUIRE(p.is_ok());
  const auto& m = p->metrics;
  CHECK(m.at("kernels") == 3);
  CHECK(m.at("duration_us") == Approx((3520 + 3520 + 3648) / 1e3));  // "3,520": thousands separators
  CHECK(m.at("registers_per_thread") == 40);
  CHECK(m.at("shared_bytes_per_block") == 64 + 4096);  // static + dynamic
  CHECK(m.at("l2_hit_pct") == 100);                    // ncu's 109.5 % clamped
  CHECK(m.at("dram_pct") == Approx(0.17).epsilon(0.05));
  CHECK(m.at("limiter") == 0);  // a one-block correctness shape fills nothing
  CHECK(p->summary.rfind("3 kernels, 10.7 us: dram 0 %, sm 0 % of peak; occupancy 12 %; L1 hit 0 %, L2 hit 100 %; "
                         "40 registers/thread, 4160 B shared/block: latency bound",
                         0) == 0);
  CHECK(p->summary.find("latency bound") != std::string::npos);
  CHECK(p->summary.find("longest: void softmax_smem_kernel<256, 4>") != std::string::npos);

  auto reference = parse_ncu_csv(fixture(), 589);
  REQUIRE(reference.is_ok());
  CHECK(reference->metrics.at("kernels") == 1);
  CHECK(reference->metrics.at("registers_per_thread") == 27);
  CHECK(parse_ncu_csv(fixture(), 0)->metrics.at("kernels") == 4);  // every process
  CHECK(parse_ncu_csv(fixture(), 12345).status().code() == kiln::StatusCode::kNotFound);
}

TEST_CASE("the limiter: memory or compute bound from 60 % of peak, weighted by duration", "[profile]") {
  auto memory = parse_ncu_csv(synthetic({{7, 9000, 85, 20}, {7, 1000, 10, 90}}), 7);
  REQUIRE(memory.is_ok());
  CHECK(memory->metrics.at("dram_pct") == Approx(77.5));  // (9000*85 + 1000*10) / 10000
  CHECK(memory->metrics.at("sm_pct") == Approx(27));
  CHECK(memory->metrics.at("limiter") == 1);
  CHECK(memory->summary.find(": memory bound") != std::string::npos);
  auto compute = parse_ncu_csv(synthetic({{7, 1000, 30, 75}}), 7);
  REQUIRE(compute.is_ok());
  CHECK(compute->metrics.at("limiter") == 2);
  CHECK(compute->metrics.count("occupancy_pct") == 0);  // not asked in this CSV: left out, not invented
  CHECK(compute->summary ==
        "1 kernel, 1.0 us: dram 30 %, sm 75 % of peak; 32 registers/thread, 0 B shared/block: "
        "compute bound");
}

TEST_CASE("ncu output that is not a profile is an error, never a made-up profile", "[profile]") {
  CHECK_FALSE(parse_ncu_csv("", 1).is_ok());
  CHECK_FALSE(parse_ncu_csv("==PROF== ERR_NVGPUCTRPERM - The user does not have permission\n", 1).is_ok());
  CHECK_FALSE(parse_ncu_csv("\"a\",\"b\"\n\"1\",\"2\"\n", 1).is_ok());
}

TEST_CASE("the ncu command line profiles every process of the evaluation child, raw, into a file", "[profile]") {
  auto argv = kiln::cuda::ncu_argv("/usr/local/cuda/bin/ncu", "ncu.csv", 16, {"kiln-eval-cuda", "--profile"});
  REQUIRE(argv.size() > 4);
  CHECK(argv.front() == "/usr/local/cuda/bin/ncu");
  CHECK(argv[argv.size() - 2] == "kiln-eval-cuda");
  CHECK(argv.back() == "--profile");
  const std::string joined = [&] {
    std::string s;
    for (const auto& a : argv) s += a + " ";
    return s;
  }();
  CHECK(joined.find("--target-processes all --csv --page raw") != std::string::npos);
  CHECK(joined.find("--launch-count 16 --log-file ncu.csv") != std::string::npos);
  CHECK(joined.find("gpu__time_duration.sum") != std::string::npos);
}

TEST_CASE("a failed ncu run is named by ncu's own errors, and only a passing trouble is tried again", "[profile]") {
  using kiln::cuda::ncu_errors;
  using kiln::cuda::ncu_failure_is_transient;
  const std::string busy =
      "==PROF== Connected to process 41\n"
      "==ERROR== Failed to prepare kernel for profiling\n"
      "==ERROR==   Unknown Error on device 0.  \n"
      "==PROF== Disconnected from process 41\n";
  CHECK(ncu_errors(busy) == "Failed to prepare kernel for profiling; Unknown Error on device 0.");
  CHECK(ncu_failure_is_transient(busy));
  const std::string perm =
      "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
      "Performance Counters on the target device 0.\n";
  CHECK(ncu_errors(perm).rfind("ERR_NVGPUCTRPERM", 0) == 0);
  CHECK_FALSE(ncu_failure_is_transient(perm));
  CHECK(ncu_errors("==PROF== all good\n").empty());
  CHECK(ncu_errors(std::string(1000, 'x') + "==ERROR== " + std::string(1000, 'y')).size() == 400);
  // At most three, so a flood of errors stays one readable line.
  std::string many;
  for (int i = 0; i < 10; ++i) many += "==ERROR== e" + std::to_string(i) + "\n";
  CHECK(ncu_errors(many) == "e0; e1; e2");
}
