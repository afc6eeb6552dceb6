#include <catch2/catch.hpp>

#include "kiln/compiler/handler.h"
#include "kiln/core/files.h"

using kiln::compiler::parse_ptxas_usage;
using kiln::compiler::trim_log;

// Captured from nvcc 13.0 (-Xptxas -v, sm_90) for two kernels, one with a local array.
static const char* kPtxas13 = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3bigPfi' for 'sm_90'
ptxas info    : Function properties for _Z3bigPfi
    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 256 bytes cumulative stack size
ptxas info    : Compile time = 59.894 ms
ptxas info    : Compiling entry function '_Z5scalePfPKfi' for 'sm_90'
ptxas info    : Function properties for _Z5scalePfPKfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 2.647 ms
)";

// The older format (CUDA 11/12): constant memory on the same line, spills present.
static const char* kPtxas12 = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6rmsnormPK6__halfS1_PS_ii' for 'sm_80'
ptxas info    : Function properties for _Z6rmsnormPK6__halfS1_PS_ii
    48 bytes stack frame, 40 bytes spill stores, 24 bytes spill loads
ptxas info    : Used 255 registers, 4096 bytes smem, 380 bytes cmem[0]
)";

TEST_CASE("ptxas usage is parsed, the maximum over kernels", "[compiler]") {
  auto u = parse_ptxas_usage(kPtxas13);
  CHECK(u.registers == 32);
  CHECK(u.shared_bytes == 1024);
  CHECK(u.stack_bytes == 256);
  CHECK(u.spill_bytes == 0);

  auto old = parse_ptxas_usage(kPtxas12);
  CHECK(old.registers == 255);
  CHECK(old.shared_bytes == 4096);
  CHECK(old.stack_bytes == 48);
  CHECK(old.spill_bytes == 64);
}

TEST_CASE("no ptxas output means unknown usage", "[compiler]") {
  auto u = parse_ptxas_usage("kernel.cu(3): error: expected an expression\n");
  CHECK(u.registers == -1);
  CHECK(u.shared_bytes == -1);
  CHECK(u.spill_bytes == -1);
  CHECK(u.stack_bytes == -1);
}

TEST_CASE("a log is trimmed to its first errors", "[compiler]") {
  std::string noise;
  for (int i = 0; i < 200; ++i)
    noise += "kernel.cpp:1:1: warning: something harmless number " + std::to_string(i) + "\n";
  std::string errors =
      "kernel.cpp: In function 'int kiln_entry(const kiln_args*)':\n"
      "kernel.cpp:20:5: error: 'foo' was not declared in this scope\n";
  for (int i = 0; i < 200; ++i) errors += "kernel.cpp:30:1: error: follow-on error " + std::to_string(i) + "\n";
  std::string log = noise + errors;

  std::string t = trim_log(log, 1024);
  CHECK(t.size() <= 1024 + 40);
  CHECK(t.find("'foo' was not declared") != std::string::npos);
  CHECK(t.find("In function 'int kiln_entry") != std::string::npos);
  CHECK(t.rfind("[... ", 0) == 0);  // says the warnings before were dropped
  CHECK(t.find("bytes dropped]") != std::string::npos);

  CHECK(trim_log("short log\n", 1024) == "short log\n");
}

TEST_CASE("the kernel ABI header is embedded verbatim", "[compiler]") {
  auto file = kiln::read_file(KILN_SOURCE_DIR "/libs/core/include/kiln/kernel_abi.h");
  REQUIRE(file.is_ok());
  CHECK(kiln::compiler::kernel_abi_header() == *file);
}
