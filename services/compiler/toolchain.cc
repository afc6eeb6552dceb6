// Which compilers this worker has: their version lines, asked once, are part of every cache key and of the
// capabilities the worker announces.
#include <mutex>
#include <sstream>

#include "build_steps.h"
#include "kiln/compiler/handler.h"
#include "kiln/core/cpus.h"
#include "kiln/core/files.h"

namespace kiln::compiler {

using namespace detail;

Result<std::string> CompileHandler::toolchain(proto::Backend backend) {
  {
    std::lock_guard<std::mutex> lock(toolchain_mu_);
    if (auto it = toolchains_.find(backend); it != toolchains_.end()) return it->second;
  }
  const std::string compiler = backend == proto::Backend::kCuda ? options_.nvcc : options_.cxx;
  TempDir scratch("kiln-compile");
  sandbox::SandboxOptions run;
  run.argv = {compiler, "--version"};
  run.working_dir = scratch.path();
  run.env = compiler_env(compiler, scratch.path(), options_.huge_pages);
  run.timeout_s = kVersionTimeoutS;
  auto result = sandbox::run_sandboxed(run);
  if (!result.is_ok()) return result.status().with_context("toolchain " + compiler);
  if (!result->succeeded()) {
    return unavailable("toolchain " + compiler + " --version: " + result->describe(run.timeout_s));
  }
  std::vector<std::string> lines;
  std::stringstream text(result->stdout_text);
  for (std::string line; std::getline(text, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) return unavailable("toolchain " + compiler + " --version printed nothing");
  // g++ names itself on the first line; nvcc says "Cuda compilation tools, release 13.0, V13.0.88" on the
  // line before its build tag, which is the one a person recognizes.
  std::string version = lines.front();
  if (backend == proto::Backend::kCuda) {
    version = lines.back();
    for (const auto& line : lines) {
      if (line.find("release") != std::string::npos) version = line;
    }
  }
  std::lock_guard<std::mutex> lock(toolchain_mu_);
  toolchains_[backend] = version;
  return version;
}

proto::Capabilities CompileHandler::capabilities() {
  proto::Capabilities caps;
  caps.arch = host_arch();
  auto cxx = toolchain(proto::Backend::kCpu);
  caps.toolchain = cxx.is_ok() ? *cxx : "";
  return caps;
}

}  // namespace kiln::compiler
