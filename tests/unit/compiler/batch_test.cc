#include "kiln/compiler/batch.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "kiln/compiler/handler.h"
#include "kiln/core/files.h"
#include "kiln/testing/skip.h"

using kiln::compiler::batch_unit;
using kiln::compiler::batchable;
using kiln::compiler::Defines;
using kiln::compiler::preprocessor_text;
using kiln::compiler::ptxas_log_by_variant;
using kiln::compiler::source_directives;

namespace {

constexpr const char* kSource = R"(// a kernel
#include <cuda_runtime.h>
#include "kiln/kernel_abi.h"
#ifndef BLOCK
#define BLOCK 256  /* threads */
#endif
#define TWICE(x) \
  ((x) * 2)
/* #define NOT_A_MACRO 1
#include "not_an_include.h" */
// #define NOR_THIS 1
__global__ void k(float* y) { y[threadIdx.x] = TWICE(BLOCK); }
extern "C" KILN_EXPORT int kiln_entry(const kiln_args* args) {
  k<<<1, BLOCK, 0, static_cast<cudaStream_t>(args->stream)>>>(static_cast<float*>(args->outputs[0].data));
  return 0;
}
)";

}  // namespace

TEST_CASE("comments go and continued lines join before directives are read", "[compiler][batch]") {
  CHECK(preprocessor_text("a // b \\\n c\nd") == "a  \nd");                // a comment becomes one blank
  CHECK(preprocessor_text("a /* x\n y */ #define Z") == "a   #define Z");  // not a directive
  CHECK(preprocessor_text("/* x\n y */ #define Z") == "  #define Z");      // a directive
  CHECK(preprocessor_text("#def\\\nine X 1") == "#define X 1");
  CHECK(preprocessor_text("s = \"// not a comment\"; c = '\\''; /**/") == "s = \"// not a comment\"; c = '\\'';  ");
  // Blanks between a backslash and the newline still join the lines (as gcc and nvcc do, with a warning).
  CHECK(preprocessor_text("st\\  \nd::min") == "std::min");
  CHECK(preprocessor_text("a // b \\ \t\r\n c\nd") == "a  \nd");
  // A raw string is one literal: no quote or comment inside it counts.
  CHECK(preprocessor_text("q = R\"(\")\"; o = \"/*\"; std::min(1, 2); /* x */") ==
        "q = R\"(\")\"; o = \"/*\"; std::min(1, 2);  ");
  CHECK(preprocessor_text("q = u8R\"x(a)\" /* )x\"; k /**/") == "q = u8R\"x(a)\" /* )x\"; k  ");
}

TEST_CASE("a source's includes and the macros it defines are read as the preprocessor sees them", "[compiler][batch]") {
  auto d = source_directives(kSource);
  CHECK(d.includes == std::vector<std::string>{"<cuda_runtime.h>", "\"kiln/kernel_abi.h\""});
  CHECK(d.defined == std::vector<std::string>{"BLOCK", "TWICE"});
}

TEST_CASE("only sources that mean the same in a namespace of their own are batched", "[compiler][batch]") {
  CHECK(batchable(kSource, {"BLOCK", "VEC"}).is_ok());
  const std::string src(kSource);
  auto refused = [&](const std::string& source, std::vector<std::string> params = {"BLOCK"}) {
    auto st = batchable(source, params);
    INFO(st.message());
    CHECK(st.code() == kiln::StatusCode::kFailedPrecondition);
    return st.message();
  };
  CHECK(refused("#include \"helpers.cuh\"\n" + src).find("helpers.cuh") != std::string::npos);
  CHECK(refused("  #  pragma once\n" + src).find("#pragma once") != std::string::npos);
  CHECK(refused("extern \"C\" __global__ void other() {}\n" + src).find("C-linkage") != std::string::npos);
  CHECK(refused("extern \"C\" {\nint g;\n}\n" + src).find("C-linkage") != std::string::npos);
  CHECK(refused("int n = __COUNTER__;\n" + src).find("__COUNTER__") != std::string::npos);
  CHECK(refused(src, {"_GLIBCXX_ASSERTIONS"}).find("_GLIBCXX_ASSERTIONS") != std::string::npos);
  CHECK(refused(src, {"NDEBUG"}).find("NDEBUG") != std::string::npos);
  // Inside a comment or a string it is not code.
  CHECK(batchable("// extern \"C\" void f();\nconst char* s = \"extern \\\"C\\\" void g();\";\n" + src, {}).is_ok());
  CHECK(batchable("extern __shared__ float dyn[];\n" + src, {}).is_ok());
}

TEST_CASE("a batch includes the headers once and each variant inside its own defines", "[compiler][batch]") {
  const std::string u = batch_unit("kernel.cu", kSource, {Defines{{"BLOCK", "128"}}, Defines{{"BLOCK", "512"}}});
  INFO(u);
  // Headers at global scope before any variant.
  CHECK(u.find("#include <cuda_runtime.h>") < u.find("namespace kiln_variant_0"));
  CHECK(u.find("#include \"kiln/kernel_abi.h\"") < u.find("namespace kiln_variant_0"));
  // Each variant saves and restores every macro it may touch, so the next starts from the headers' state.
  const std::string v0 =
      "#pragma push_macro(\"BLOCK\")\n#pragma push_macro(\"TWICE\")\n#pragma push_macro(\"kiln_entry\")\n"
      "#undef kiln_entry\n#define kiln_entry kiln_entry_v0\n#undef BLOCK\n#define BLOCK 128\n"
      "namespace kiln_variant_0 {\n#include \"kernel.cu\"\n}\n"
      "#pragma pop_macro(\"kiln_entry\")\n#pragma pop_macro(\"TWICE\")\n#pragma pop_macro(\"BLOCK\")\n";
  CHECK(u.find(v0) != std::string::npos);
  CHECK(u.find("#define BLOCK 512\nnamespace kiln_variant_1 {") != std::string::npos);
  CHECK(source_directives("#undef max\n").defined == std::vector<std::string>{"max"});
  CHECK(kiln::compiler::variant_stub(1).find("int kiln_entry(const void* args) { return kiln_entry_v1(args); }") !=
        std::string::npos);
}

TEST_CASE("batches hold the share of builds that brings the builds in flight within the cores", "[compiler][batch]") {
  struct Case {
    int in_flight, cores;
    int64_t batch_max;
    double share;
  };
  // clang-format off
  const Case cases[] = {
      // A 16-core host, graph builds of ~1.5 cores, 12 of the cores the target: alone up to 8 in flight,
      // then pairs and builds alone mixed up to 16, pairs and threes up to 24, fours from 32; never more
      // than batch_max.
      {1, 16, 4, 1}, {4, 16, 4, 1}, {8, 16, 4, 1}, {12, 16, 4, 1.5}, {16, 16, 4, 2},
      {20, 16, 4, 2.5}, {32, 16, 4, 4}, {64, 16, 4, 4}, {64, 16, 1, 1},
      // Two cores: two graph builds already ask for more than 1.5 of them.
      {2, 2, 4, 2}, {8, 2, 4, 4},
      // Room for builds still to come (the window waits for them), never a batch for a build alone, and
      // no cores counts as one.
      {3, 1, 8, 6}, {2, 0, 4, 4}, {0, 1, 4, 1}};
  // clang-format on
  for (const Case& c : cases) {
    INFO(c.in_flight << " in flight, " << c.cores << " cores, batch_max " << c.batch_max);
    CHECK(kiln::compiler::batch_share(c.in_flight, c.cores, 1.5, c.batch_max) == Approx(c.share));
  }
}

TEST_CASE("batch sizes average the share they are given", "[compiler][batch]") {
  auto sizes = [](double share, int n) {
    kiln::compiler::BatchSizer sizer;
    std::vector<size_t> out;
    for (int i = 0; i < n; ++i) out.push_back(sizer.next(share));
    return out;
  };
  // 1.6: three pairs for every two builds alone, spread out rather than bunched.
  CHECK(sizes(1.6, 5) == std::vector<size_t>{1, 2, 1, 2, 2});
  CHECK(sizes(2.0, 3) == std::vector<size_t>{2, 2, 2});
  CHECK(sizes(1.0, 3) == std::vector<size_t>{1, 1, 1});
  CHECK(sizes(0.5, 2) == std::vector<size_t>{1, 1});  // never below one
  const std::vector<size_t> long_run = sizes(2.25, 400);
  size_t builds = 0;
  for (size_t s : long_run) {
    CHECK((s == 2 || s == 3));
    builds += s;
  }
  CHECK(builds == 900);  // 2.25 on average
}

TEST_CASE("ptxas's report of a batch is cut per variant", "[compiler][batch]") {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function '_ZN14kiln_variant_11kILi512EEEvPf' for 'sm_90'\n"
      "ptxas info    : Function properties for _ZN14kiln_variant_11kILi512EEEvPf\n"
      "    0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem\n"
      "ptxas info    : Compiling entry function '_ZN14kiln_variant_01kILi128EEEvPf' for 'sm_90'\n"
      "ptxas info    : Function properties for _ZN14kiln_variant_01kILi128EEEvPf\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 16 registers, used 1 barriers, 512 bytes smem\n";
  auto parts = ptxas_log_by_variant(log, 2);
  REQUIRE(parts.size() == 2);
  auto u0 = kiln::compiler::parse_ptxas_usage(parts[0]);
  auto u1 = kiln::compiler::parse_ptxas_usage(parts[1]);
  CHECK(u0.registers == 16);
  CHECK(u0.shared_bytes == 512);
  CHECK(u0.spill_bytes == 0);
  CHECK(u1.registers == 40);
  CHECK(u1.shared_bytes == 2048);
  CHECK(u1.spill_bytes == 16);
  CHECK(parts[0].find("0 bytes gmem") != std::string::npos);
  CHECK(parts[1].find("0 bytes gmem") != std::string::npos);
}

namespace {

// Runs a shell command in `dir`; its output goes to `log` there.
bool sh(const std::string& dir, const std::string& cmd, const std::string& log) {
  const std::string line = "cd '" + dir + "' && { " + cmd + "; } > '" + log + "' 2>&1";
  return std::system(line.c_str()) == 0;
}

std::string read_in(const std::string& dir, const std::string& name) {
  auto text = kiln::read_file(dir + "/" + name);
  return text.is_ok() ? *text : "";
}

// Each kernel's PTX body by its mangled name, with the names (the batch's carry a namespace) and the
// basic-block labels' function numbers taken out: what is left is what ptxas turns into machine code.
std::map<std::string, std::string> ptx_entries(const std::string& ptx) {
  std::map<std::string, std::string> out;
  const std::regex names("_Z[A-Za-z0-9_]*");
  const std::regex labels("\\$L__BB[0-9]+_");
  for (size_t at = ptx.find(".entry "); at != std::string::npos; at = ptx.find(".entry ", at + 1)) {
    const size_t name_end = ptx.find('(', at);
    const size_t end = ptx.find("\n}\n", at);
    if (name_end == std::string::npos || end == std::string::npos) break;
    std::string body = ptx.substr(at, end - at);
    body = std::regex_replace(std::regex_replace(body, names, "NAME"), labels, "$$L__BB_");
    out[ptx.substr(at + 7, name_end - at - 7)] = body;
  }
  return out;
}

}  // namespace

// The batch must build what each variant alone builds: the same PTX for every kernel (so the same machine
// code), the same resource usage read from ptxas, and a shared object per variant whose kiln_entry is its.
TEST_CASE("a batch of bundled CUDA kernels builds what each variant alone builds", "[compiler][batch][cuda]") {
  kiln::compiler::CompilerOptions options;
  if (access(options.nvcc.c_str(), X_OK) != 0) KILN_SKIP("no nvcc at " << options.nvcc);
  const std::string cuda_lib = options.nvcc.substr(0, options.nvcc.rfind("/bin/")) + "/lib64";
  const std::map<std::string, std::vector<Defines>> tasks = {
      // The defaults between two others: nothing of the variant before may leak into it.
      {"cuda_rmsnorm", {{{"BLOCK", "1024"}, {"VEC", "2"}}, {}, {{"BLOCK", "128"}, {"VEC", "8"}}}},
      {"cuda_sgemm",
       {{{"BM", "64"}, {"BN", "128"}, {"BK", "16"}, {"TM", "4"}, {"TN", "8"}}, {}, {{"BK", "16"}, {"TM", "4"}}}},
  };
  for (const auto& [name, variants] : tasks) {
    INFO(name);
    kiln::TempDir dir("kiln-batch-test");
    const std::string d = dir.path();
    auto source = kiln::read_file(std::string(KILN_SOURCE_DIR "/configs/tasks/") + name + "/kernel.cu");
    REQUIRE(source.is_ok());
    std::vector<std::string> params;
    for (const auto& v : variants)
      for (const auto& [p, value] : v) params.push_back(p);
    REQUIRE(batchable(*source, params).is_ok());
    REQUIRE(kiln::make_dirs(d + "/kiln").is_ok());
    REQUIRE(kiln::write_file(d + "/kiln/kernel_abi.h", std::string(kiln::compiler::kernel_abi_header())).is_ok());
    REQUIRE(kiln::write_file(d + "/kernel.cu", *source).is_ok());
    REQUIRE(kiln::write_file(d + "/batch.cu", batch_unit("kernel.cu", *source, variants)).is_ok());
    const std::string nvcc =
        options.nvcc + " -O3 -Xcompiler -fPIC -I. -gencode arch=compute_90,code=[sm_90,compute_90]";

    INFO(read_in(d, "batch.cu"));
    REQUIRE(sh(d, nvcc + " -Xptxas -v -c -o batch.o batch.cu", "batch.log"));
    INFO(read_in(d, "batch.log"));
    REQUIRE(sh(d, nvcc + " -ptx -o batch.ptx batch.cu", "batch-ptx.log"));
    const auto batch_ptx = ptx_entries(read_in(d, "batch.ptx"));
    const auto usage_logs = ptxas_log_by_variant(read_in(d, "batch.log"), variants.size());

    for (size_t i = 0; i < variants.size(); ++i) {
      INFO("variant " << i);
      std::string defines;
      for (const auto& [p, value] : variants[i]) defines += " -D" + p + "=" + value;
      const std::string si = std::to_string(i);
      REQUIRE(sh(d, nvcc + defines + " -Xptxas -v -c -o single" + si + ".o kernel.cu", "single" + si + ".log"));
      REQUIRE(sh(d, nvcc + defines + " -ptx -o single" + si + ".ptx kernel.cu", "single" + si + "-ptx.log"));

      const auto alone = kiln::compiler::parse_ptxas_usage(read_in(d, "single" + si + ".log"));
      const auto in_batch = kiln::compiler::parse_ptxas_usage(usage_logs[i]);
      CHECK(in_batch.registers == alone.registers);
      CHECK(in_batch.shared_bytes == alone.shared_bytes);
      CHECK(in_batch.spill_bytes == alone.spill_bytes);
      CHECK(in_batch.stack_bytes == alone.stack_bytes);

      const auto single_ptx = ptx_entries(read_in(d, "single" + si + ".ptx"));
      REQUIRE(single_ptx.size() == 1);
      size_t matched = 0;
      for (const auto& [mangled, body] : batch_ptx) {
        const std::string tag =
            std::to_string(kiln::compiler::variant_namespace(i).size()) + kiln::compiler::variant_namespace(i);
        if (mangled.find(tag) == std::string::npos) continue;
        ++matched;
        CHECK(body == single_ptx.begin()->second);
      }
      CHECK(matched == 1);

      REQUIRE(kiln::write_file(d + "/stub" + si + ".c", kiln::compiler::variant_stub(i)).is_ok());
      REQUIRE(sh(d,
                 "gcc -c -fPIC -o stub" + si + ".o stub" + si + ".c && g++ -shared -o v" + si + ".so batch.o stub" +
                     si + ".o -L" + cuda_lib + " -lcudart && nm -D --defined-only v" + si + ".so",
                 "link" + si + ".log"));
      CHECK(read_in(d, "link" + si + ".log").find(" T kiln_entry\n") != std::string::npos);
    }
  }
}
