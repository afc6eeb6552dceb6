// What the compile handler's files share: the limits of a build, the marks of nvcc's dry run, and the
// small steps every build takes (its flags, its folder, the sandbox its compiler runs in). Private to the
// compiler service.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/compiler/build_log.h"
#include "kiln/compiler/handler.h"
#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"
#include "kiln/sandbox/sandbox.h"

namespace kiln::compiler::detail {

// Cores one CUDA build keeps busy when nvcc's steps run as a graph (the host and device sides at once):
// 1.5-1.6 with one build at a time on an H200 host and 1.4 on a 2-core machine (bench/compile, cores_busy).
constexpr double kGraphCoresPerBuild = 1.5;
// Part of every cache key: bump it when the way builds are made changes.
constexpr std::string_view kCacheVersion = "kiln-compile-cache-v2";
// What the sandbox keeps of a compiler's output before trimming; enough for any useful log.
constexpr size_t kMaxCompilerOutputBytes = 1u << 20;
// A compiler run may not write files larger than this (a runaway template cannot fill the disk).
constexpr int64_t kMaxOutputFileBytes = 1ll << 30;
// How long asking a compiler for its version may take.
constexpr double kVersionTimeoutS = 30;
// Of a reference's build log quoted when the job is given back or dead-lettered: the text travels in the
// broker's log lines and in the dead letter, so only the errors.
constexpr size_t kMaxRetryLogBytes = 2048;
constexpr std::string_view kOutputName = "out.so";
constexpr std::string_view kAbiHeaderPath = "kiln/kernel_abi.h";
// nvcc's dry run for a plan: a define that marks where a build's -D flags go, the folder for nvcc's
// intermediate files, and how long asking may take.
constexpr std::string_view kDefinesMark = "KILN_DEFINES_GO_HERE_=1";
constexpr std::string_view kBuildDirMark = "@KILN_BUILD_DIR@";
constexpr std::string_view kKeepDir = "kiln-steps";
constexpr double kDryRunTimeoutS = 30;

// The flags of a build but its -D flags.
std::vector<std::string> base_flags(proto::Backend backend, const std::string& arch);
std::vector<std::string> define_flags(const std::map<std::string, std::string>& defines);
// A candidate's template parameters become -D flags: names and values a compiler reads as one token each.
Status check_params(const std::map<std::string, std::string>& params);
std::string join(const std::vector<std::string>& parts);
std::string shell_quote(const std::string& v);

// The environment of a compiler run: a PATH with the compiler's own folder first, `scratch` as home and
// temporary folder, and (with `huge_pages`) glibc's heap on transparent huge pages.
std::vector<std::string> compiler_env(const std::string& compiler, const std::string& scratch, bool huge_pages);
// A run of `compiler` (or a script of its steps) in `dir`, with the limits of a build.
sandbox::SandboxOptions compiler_run(const std::string& compiler, const std::string& dir,
                                     const CompilerOptions& options);
// The compiler driver itself crashed: a fault of the toolchain, not of the source it was given.
bool crashed(const sandbox::SandboxResult& result);

// A build folder: the ABI header and the sources (names checked by task::parse_task: relative, no "..").
Status write_sources(const std::string& dir, const proto::FileMap& sources);
// At most `max_bytes` of a file (a step's output; the rest is dropped and said so), "" when it is absent.
std::string read_head(const std::string& path, size_t max_bytes);
// What nvcc would have printed for the graph that ran in `dir`: each step's output, in nvcc's order.
void append_step_output(const std::string& dir, std::string& out, std::string& err);
// The resources ptxas reported, into the build's record.
void record_usage(proto::BuildInfo& info, const PtxasUsage& usage);

// A batch's shell script: its compile (nvcc, or nvcc's steps as a graph), then each variant's link.
struct BatchScript {
  std::string compile;             // exits 1 when it fails
  std::vector<std::string> links;  // one per variant
  bool as_graph = false;           // the compile runs nvcc's steps (their output is in the steps' folder)
  // The whole script: the compile, then the links side by side; it fails if any of them does.
  std::string text() const;
};

}  // namespace kiln::compiler::detail
