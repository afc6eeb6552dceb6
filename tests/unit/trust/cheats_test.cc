// The cheating battery (issue 3): kernels written to fool the evaluation, each run end to end through the
// real kiln-eval in the sandbox. (The cheats whose verdict rests on a timing, calling the reference, are
// in timing_test.cc, which runs alone.) The cheats tests/unit/eval already covers in-process (NaN-tailed skip,
// first-call-only, previous result keyed on the size, input overwritten, degrading after a call count)
// are not repeated; these are the rest, and variants that hide from those checks.
//
// The last three were holes while the candidate shared the evaluator's process (docs/threat-model.md);
// each contestant now runs in a runner process of its own, stopped between its calls, and the report is
// authenticated with a key the runners never hold.
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "harness.h"

using kiln::trust::Harness;
using kiln::trust::kernel_source;
using kiln::trust::promotable;
using kiln::trust::run;
using kiln::trust::Timing;
using kiln::trust::Verdict;
using status = kiln::proto::TestStatus;

TEST_CASE("stale output: skipping the work when the output buffer is the one of the last call", "[trust]") {
  // A naive benchmark reuses its output buffer; Kiln poisons the outputs with NaN before every call.
  Harness h;
  Verdict v = run(h, "stale_output",
                  "if (y == last_y && n == last_n) return 0;\n"
                  "last_y = y; last_n = n;\n" +
                      kiln::trust::kHonestBody,
                  "static float* last_y = nullptr; static int64_t last_n = -1;");
  INFO(v.message);
  CHECK(v.status == status::kNonFinite);
  CHECK(v.message.find("non-finite") != std::string::npos);
  CHECK(v.message.find("second call") != std::string::npos);
}

TEST_CASE("results cached by input address are caught by the refill after timing", "[trust]") {
  Harness h;
  Verdict v =
      run(h, "address_cache",
          "if (x == cx && w == cw && n == cn && n <= kMax) { std::memcpy(y, cache, n * sizeof(float)); return 0; }\n" +
              kiln::trust::kHonestBody +
              "\nif (n <= kMax) { std::memcpy(cache, y, n * sizeof(float)); cx = x; cw = w; cn = n; }",
          "constexpr int64_t kMax = 1 << 20; static float cache[kMax];\n"
          "static const float* cx = nullptr; static const float* cw = nullptr; static int64_t cn = -1;",
          Timing{});
  INFO(v.message);
  CHECK(v.status == status::kMismatch);
  CHECK_FALSE(v.report.correctness.passed);
  REQUIRE_FALSE(v.report.correctness.first_mismatches.empty());
}

TEST_CASE("work finished on a background thread after returning is caught", "[trust]") {
  // The call returns at once and a thread fills the outputs a moment later: the outputs are compared
  // before that moment.
  Harness h;
  Verdict v = run(h, "background_thread",
                  "std::thread([=] {\n"
                  "  std::this_thread::sleep_for(std::chrono::milliseconds(20));\n"
                  "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * alpha + w[i];\n"
                  "}).detach();",
                  "#include <chrono>\n#include <thread>");
  INFO(v.message);
  // Non-finite as a rule; a late thread may instead hit freed memory and crash the child, which is
  // also a rejection.
  CHECK((v.status == status::kNonFinite || v.status == status::kCrashed));
  CHECK_FALSE(promotable(v));
}

TEST_CASE("computing in lower precision than declared is caught by the tolerance", "[trust]") {
  // fp32 task computed in bfloat16 (the low 16 bits of every float dropped): relative error up to 2^-8.
  Harness h;
  Verdict v = run(h, "bf16_truncation",
                  "auto bf16 = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); u &= 0xFFFF0000u; std::memcpy(&f, &u, "
                  "4); return f; };\n"
                  "for (int64_t i = 0; i < n; ++i) y[i] = bf16(bf16(x[i]) * bf16(alpha) + bf16(w[i]));");
  INFO(v.message);
  CHECK(v.status == status::kMismatch);
  CHECK(v.report.correctness.max_rel_error > 1e-4);
  CHECK(v.message.find("outputs differ from the reference") != std::string::npos);
}

TEST_CASE("skipping the tail of odd sizes is caught even when the tail is zeroed, not left NaN", "[trust]") {
  Harness h;
  Verdict v = run(h, "zeroed_tail",
                  "int64_t i = 0;\n"
                  "for (; i + 8 <= n; i += 8) for (int k = 0; k < 8; ++k) y[i + k] = x[i + k] * alpha + w[i + k];\n"
                  "for (; i < n; ++i) y[i] = 0.f;");
  INFO(v.message);
  CHECK(v.status == status::kMismatch);
  REQUIRE_FALSE(v.report.correctness.first_mismatches.empty());
  CHECK(v.report.correctness.first_mismatches[0].find("N=1 ") != std::string::npos);
}

TEST_CASE("writing into the inputs only once correctness is over is caught after timing", "[trust]") {
  // 4 cases x 2 seeds x 2 calls = 16 correctness calls; from the 20th call on, the kernel uses x as
  // scratch space and leaves it dirty.
  Harness h;
  Verdict v =
      run(h, "dirty_input_later", kiln::trust::kHonestBody + "\nif (++calls > 20) const_cast<float*>(x)[0] = -1.f;",
          "static int calls = 0;");
  INFO(v.message);
  CHECK(v.status == status::kInputModified);
  CHECK(v.message.find("input 'x' was modified") != std::string::npos);
  CHECK(v.message.find("after timing") != std::string::npos);
}

TEST_CASE("a kernel that turns wrong after a while (a time bomb) is caught after timing", "[trust]") {
  // Correct for the first 200 ms after its first call, constant afterwards: the correctness phase is
  // over by then, timing is not compared, and the check after timing must see it.
  Harness h;
  Verdict v = run(h, "time_bomb",
                  "using clock = std::chrono::steady_clock;\n"
                  "static const auto first = clock::now();\n"
                  "if (clock::now() - first > std::chrono::milliseconds(200)) { for (int64_t i = 0; i < n; ++i) y[i] = "
                  "0.f; return 0; }\n" +
                      kiln::trust::kHonestBody,
                  "#include <chrono>", Timing{"warm", 10, 0.5, 1.5, 0.005, 2, true});
  INFO(v.message);
  CHECK(v.status == status::kMismatch);
  CHECK_FALSE(promotable(v));
}

TEST_CASE("a constant output is caught", "[trust]") {
  Harness h;
  Verdict v = run(h, "constant", "for (int64_t i = 0; i < n; ++i) y[i] = 0.5f;");
  INFO(v.message);
  CHECK(v.status == status::kMismatch);
  CHECK(v.report.correctness.mismatches > 0);
}

TEST_CASE("a cache keyed on the address and a sample of the input values is caught while timed", "[trust]") {
  // A cache that checks the address plus a few sampled values would be right every time the inputs are
  // refilled and free every time they are not. The timing loop changes a block of every input before each
  // round and compares timed outputs at rounds the kernel cannot predict, so the stale answer shows.
  Harness h;
  Verdict v = run(h, "sampled_cache",
                  "auto key = [&](int64_t i) { return i < n ? x[i] + 3.f * w[i] : 0.f; };\n"
                  "float k[4] = {key(0), key(n / 3), key(n / 2), key(n - 1)};\n"
                  "if (x == cx && n == cn && n <= kMax && std::memcmp(k, ck, sizeof k) == 0) {\n"
                  "  std::memcpy(y, cache, n * sizeof(float)); return 0; }\n" +
                      kiln::trust::kHonestBody +
                      "\nif (n <= kMax) { std::memcpy(cache, y, n * sizeof(float)); cx = x; cn = n; std::memcpy(ck, k, "
                      "sizeof k); }",
                  "constexpr int64_t kMax = 1 << 20; static float cache[kMax]; static float ck[4];\n"
                  "static const float* cx = nullptr; static int64_t cn = -1;");
  INFO(v.message);
  CHECK(v.status == status::kMismatch);
  CHECK(v.message.find("timed round") != std::string::npos);
  CHECK_FALSE(promotable(v));
}

TEST_CASE("caches keyed on the address and fingerprints of 16 and 256 sampled values are not promotable", "[trust]") {
  // The larger the fingerprint, the more often it notices the block that moved and computes afresh: then
  // it is honest (and no faster); whenever it does not notice, the stale answer shows in a timed round.
  for (int samples : {16, 256}) {
    Harness h;
    const std::string name = "fingerprint_cache_" + std::to_string(samples);
    Verdict v =
        run(h, name,
            "uint64_t fp = 1469598103934665603ull;\n"
            "for (int s = 0; s < kSamples && n > 0; ++s) { const int64_t i = s * n / kSamples;\n"
            "  uint32_t b; std::memcpy(&b, &x[i], 4); fp = (fp ^ b) * 1099511628211ull;\n"
            "  std::memcpy(&b, &w[i], 4); fp = (fp ^ b) * 1099511628211ull; }\n"
            "auto& e = cache[std::make_tuple(x, w, y, n)];\n"
            "if (e.first == fp && static_cast<int64_t>(e.second.size()) == n) {\n"
            "  std::memcpy(y, e.second.data(), n * sizeof(float)); return 0; }\n" +
                kiln::trust::kHonestBody + "\ne.first = fp; e.second.assign(y, y + n);",
            "#include <map>\n#include <tuple>\n#include <vector>\nconstexpr int kSamples = " + std::to_string(samples) +
                ";\nstatic std::map<std::tuple<const float*, const float*, float*, int64_t>,"
                " std::pair<uint64_t, std::vector<float>>> cache;\n");
    INFO(samples << " samples: " << kiln::testing::status_word(v.status) << ": " << v.message);
    CHECK_FALSE(promotable(v));
    if (samples == 16) CHECK(v.status == status::kMismatch);
  }
}

TEST_CASE("a cache entry per buffer set, refreshed every eighth call, is caught", "[trust]") {
  // Keyed on the three buffers alone, so every placement the evaluator uses gets its own entry.
  Harness h;
  Verdict v = run(h, "buffer_set_cache",
                  "auto& e = cache[std::make_tuple(x, w, y, n)];\n"
                  "if (static_cast<int64_t>(e.second.size()) == n && ++e.first % 8 != 0) {\n"
                  "  std::memcpy(y, e.second.data(), n * sizeof(float)); return 0; }\n" +
                      kiln::trust::kHonestBody + "\ne.second.assign(y, y + n);",
                  "#include <map>\n#include <tuple>\n#include <vector>\n"
                  "static std::map<std::tuple<const float*, const float*, float*, int64_t>,"
                  " std::pair<int, std::vector<float>>> cache;\n");
  INFO(kiln::testing::status_word(v.status) << ": " << v.message);
  CHECK(v.status == status::kMismatch);
  CHECK_FALSE(promotable(v));
}

// ---- Cheats that needed the candidate out of the evaluator's process. ----

TEST_CASE("a background thread racing the comparison is frozen before the outputs are read", "[trust][serial]") {
  // Small inputs (the correctness cases) are computed before returning. For large ones, kiln_entry hands
  // the work to a spinning worker thread and returns at once, hoping the worker finishes before the
  // outputs are read. The runner stops itself (all its threads) the moment the call returns and only then
  // are its outputs copied out; whatever CPU the worker used before the stop is on the clock.
  Harness h;
  Verdict v = run(h, "racing_thread",
                  "if (n < 100000) {\n" + kiln::trust::kHonestBody +
                      "\n  return 0;\n}\n"
                      "static const bool started = [] {\n"
                      "  std::thread([] {\n"  // detached: a joinable static thread would abort at exit
                      "    for (;;) {\n"
                      "      if (!pending.load(std::memory_order_acquire)) continue;\n"
                      "      const Job j = current;\n"
                      "      for (int64_t i = 0; i < j.n; ++i) j.y[i] = j.x[i] * j.alpha + j.w[i];\n"
                      "      pending.store(false, std::memory_order_release);\n"
                      "    }\n"
                      "  }).detach();\n"
                      "  return true;\n"
                      "}();\n"
                      "(void)started;\n"
                      "while (pending.load(std::memory_order_acquire)) {}\n"
                      "current = Job{x, w, y, n, alpha};\n"
                      "pending.store(true, std::memory_order_release);",
                  "#include <atomic>\n#include <thread>\n"
                  "struct Job { const float* x; const float* w; float* y; int64_t n; float alpha; };\n"
                  "static Job current; static std::atomic<bool> pending{false};");
  INFO(v.message);
  // Caught outright when the worker is stopped mid-job; when it got its job done before the stop, the
  // CPU time it used after the return was charged to the call, so the hand-off gains nothing.
  if (v.status == status::kOk) {
    REQUIRE(v.report.performance.cases.size() == 1);
    CHECK(v.report.performance.cases[0].speedup < kiln::trust::kPromotionSpeedup);
  } else {
    CHECK((v.status == status::kNonFinite || v.status == status::kMismatch));
  }
  CHECK_FALSE(promotable(v));
}

TEST_CASE("a report forged by the candidate is never believed", "[trust]") {
  // This candidate's constructor writes a report of its own (correct, 50x faster) to the --out path and
  // exits. It runs in a runner process, not in the evaluator: the evaluator sees its runner die while
  // loading, writes its own verdict over the file and authenticates it with the report key.
  kiln::proto::TestReport forged;
  forged.status = status::kOk;
  forged.message = "correct on 5 shapes; speedup 50x [45x, 55x] on N=262144";
  forged.correctness.passed = true;
  forged.correctness.tested_shapes = {"N=1", "N=17", "N=1001", "N=4099", "N=262144"};
  forged.performance.measured = true;
  forged.performance.method = "host_clock";
  forged.performance.mode = "cold";
  kiln::proto::CaseTiming c;
  c.dims = {{"N", 262144}};
  c.candidate.median_us = 2;
  c.candidate.n = 1000;
  c.reference.median_us = 100;
  c.reference.n = 1000;
  c.speedup = 50;
  c.speedup_lo = 45;
  c.speedup_hi = 55;
  forged.performance.cases.push_back(c);
  const std::string bytes = kiln::proto::encode(forged);
  std::string array;
  for (unsigned char b : bytes) array += std::to_string(b) + ",";

  Harness h;
  Verdict v = run(h, "forger", kiln::trust::kHonestBody,
                  "#include <fcntl.h>\n#include <unistd.h>\n#include <string>\n#include <vector>\n"
                  "static const unsigned char kReport[] = {" +
                      array +
                      "};\n"
                      "__attribute__((constructor)) static void forge() {\n"
                      "  // The --out argument, from our own command line.\n"
                      "  int fd = open(\"/proc/self/cmdline\", O_RDONLY);\n"
                      "  std::string cmdline(65536, '\\0');\n"
                      "  ssize_t n = fd >= 0 ? read(fd, cmdline.data(), cmdline.size()) : -1;\n"
                      "  if (fd >= 0) close(fd);\n"
                      "  if (n <= 0) return;\n"
                      "  std::vector<std::string> args;\n"
                      "  for (size_t at = 0; at < static_cast<size_t>(n);) { args.emplace_back(cmdline.c_str() + at); "
                      "at += args.back().size() + 1; }\n"
                      "  for (size_t i = 0; i + 1 < args.size(); ++i) {\n"
                      "    if (args[i] != \"--out\") continue;\n"
                      "    int out = open(args[i + 1].c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);\n"
                      "    if (out < 0) return;\n"
                      "    if (write(out, kReport, sizeof kReport) != static_cast<ssize_t>(sizeof kReport)) return;\n"
                      "    close(out);\n"
                      "    _exit(0);\n"
                      "  }\n"
                      "}\n");
  INFO(v.message);
  CHECK(v.status == status::kLoadFailed);
  CHECK(v.message == "cannot load the kernel: exited with code 0 while loading it");
  CHECK_FALSE(promotable(v));
}

TEST_CASE("a candidate cannot kill or stop the evaluator, nor start a process", "[trust]") {
  // If the evaluator died after the candidate wrote a report file, that file would be all the tester
  // found (the MAC would still refuse it). The runner may signal only itself.
  Harness h;
  Verdict v = run(h, "kills_evaluator",
                  "static bool tried = false;\n"
                  "if (!tried) {\n"
                  "  tried = true;\n"
                  "  if (kill(getppid(), SIGKILL) == 0 || kill(getppid(), SIGSTOP) == 0 || kill(0, SIGKILL) == 0 ||\n"
                  "      kill(-1, SIGKILL) == 0 || fork() >= 0) {\n"
                  "    for (int64_t i = 0; i < n; ++i) y[i] = 0;  // a signal or a fork got through: be wrong\n"
                  "    return 0;\n"
                  "  }\n"
                  "}\n" +
                      kiln::trust::kHonestBody,
                  "#include <signal.h>\n#include <unistd.h>");
  INFO(v.message);
  CHECK(v.status == status::kOk);
}

#if defined(__x86_64__)
TEST_CASE("a candidate cannot patch the reference: they run in separate processes", "[trust]") {
  // At load time the candidate overwrites the start of the reference's kiln_entry with a jump to a slow
  // (300 us more per call) and *wrong* copy (every output off by 1000), then computes honestly itself.
  // The reference it finds is its own runner's copy-on-write image of the evaluator; the reference that is
  // checked and timed runs in another process. Had the patch reached it, the reference's values would
  // differ from the candidate's in correctness or in a timed round and the verdict would be a mismatch:
  // an ok verdict proves the patch stayed in the candidate's process, whatever the timing says. (How fast
  // an honest copy compiled into another binary measures is a question for the timing suite: a different
  // code layout can be really faster or slower on a given machine.)
  // The candidate refuses to run (returns 7) unless its patch took, so the test cannot pass vacuously.
  Harness h;
  Verdict v =
      run(h, "sabotage", "if (!g_patched) return 7;\n" + kiln::trust::kHonestBody,
          "#include <dlfcn.h>\n#include <sys/mman.h>\n#include <unistd.h>\n#include <chrono>\n"
          "static int g_patched = 0;\n"
          "extern \"C\" int slow_wrong_reference(const kiln_args* a) {\n"
          "  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);\n"
          "  while (std::chrono::steady_clock::now() < until) {}\n"
          "  const float* x = static_cast<const float*>(a->inputs[0].data);\n"
          "  const float* w = static_cast<const float*>(a->inputs[1].data);\n"
          "  float* y = static_cast<float*>(a->outputs[0].data);\n"
          "  const float alpha = static_cast<float>(kiln_scalar(a, \"alpha\", 1.0));\n"
          "  for (int64_t i = 0; i < a->inputs[0].shape[0]; ++i) y[i] = x[i] * alpha + w[i] + 1000.f;\n"
          "  return 0;\n"
          "}\n"
          "__attribute__((constructor)) static void patch_reference() {\n"
          "  void* handle = dlopen(\"./reference.so\", RTLD_NOW | RTLD_NOLOAD);\n"
          "  if (!handle) return;\n"
          "  auto* target = static_cast<unsigned char*>(dlsym(handle, \"kiln_entry\"));\n"
          "  if (!target) return;\n"
          "  const long page = sysconf(_SC_PAGESIZE);\n"
          "  auto* start = reinterpret_cast<unsigned char*>(reinterpret_cast<uintptr_t>(target) & ~(page - 1));\n"
          "  if (mprotect(start, 2 * page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return;\n"
          "  const auto dest = reinterpret_cast<uint64_t>(&slow_wrong_reference);\n"
          "  target[0] = 0x48; target[1] = 0xB8; std::memcpy(target + 2, &dest, 8);  // movabs rax, dest\n"
          "  target[10] = 0xFF; target[11] = 0xE0;                                   // jmp rax\n"
          "  mprotect(start, 2 * page, PROT_READ | PROT_EXEC);\n"
          "  g_patched = 1;\n"
          "}\n",
          Timing{}, "-ldl");
  INFO(v.message);
  // "mismatch" here would mean the patch reached the reference the evaluator compares with and times.
  CHECK(v.status == status::kOk);
  REQUIRE(v.report.performance.cases.size() == 1);
  CHECK(v.report.correctness.mismatches == 0);
}
#endif
