#include "build_steps.h"

#include <cctype>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "kiln/compiler/lean_headers.h"
#include "kiln/compiler/nvcc_graph.h"
#include "kiln/core/files.h"

namespace kiln::compiler {
namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

// Values of template parameters: numbers and names. Nothing a shell or a compiler driver could read as
// more than one token.
bool is_define_value(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '+')) return false;
  }
  return true;
}

}  // namespace

std::string cuda_gencode(const std::string& arch) {
  // "sm_90" -> "arch=compute_90,code=[sm_90,compute_90]"; "sm_90a" keeps its suffix on both.
  const std::string number = arch.rfind("sm_", 0) == 0 ? arch.substr(3) : arch;
  return "arch=compute_" + number + ",code=[sm_" + number + ",compute_" + number + "]";
}

namespace detail {

std::vector<std::string> base_flags(proto::Backend backend, const std::string& arch) {
  if (backend == proto::Backend::kCuda) {
    // Machine code for the target and its PTX embedded beside it, so a newer GPU can still JIT the kernel;
    // the shared runtime, so that the kernel and kiln-eval-cuda share one runtime and its error state.
    return {"-O3",     "-shared", "-Xcompiler", "-fPIC", "-gencode", cuda_gencode(arch),
            "-cudart", "shared",  "-Xptxas",    "-v",    "-I."};
  }
  return {"-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-I."};
}

std::vector<std::string> define_flags(const std::map<std::string, std::string>& defines) {
  std::vector<std::string> flags;
  for (const auto& [k, v] : defines) flags.push_back("-D" + k + "=" + v);
  return flags;
}

Status check_params(const std::map<std::string, std::string>& params) {
  for (const auto& [name, value] : params) {
    if (!is_identifier(name)) return invalid_argument("parameter '" + name + "': not an identifier");
    if (!is_define_value(value))
      return invalid_argument("parameter " + name + ": value '" + value + "' is not allowed");
  }
  return Status::ok();
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : " ") + p;
  return s;
}

std::string shell_quote(const std::string& v) {
  std::string q = "'";
  for (char c : v) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> compiler_env(const std::string& compiler, const std::string& scratch, bool huge_pages) {
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  auto dir = std::filesystem::path(compiler).parent_path();
  if (!dir.empty()) path = dir.string() + ":" + path;
  std::vector<std::string> env = {"PATH=" + path, "HOME=" + scratch, "TMPDIR=" + scratch, "LC_ALL=C"};
  // glibc ignores tunables it does not know (and other C libraries the variable), so this is safe anywhere.
  if (huge_pages) env.push_back("GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.top_pad=67108864");
  return env;
}

sandbox::SandboxOptions compiler_run(const std::string& compiler, const std::string& dir,
                                     const CompilerOptions& options) {
  sandbox::SandboxOptions run;
  run.working_dir = dir;
  run.env = compiler_env(compiler, dir, options.huge_pages);
  run.timeout_s = options.timeout_s;
  run.file_size_bytes = kMaxOutputFileBytes;
  run.max_output_bytes = kMaxCompilerOutputBytes;
  return run;
}

// (The limits the sandbox enforces end a run otherwise: a timeout, SIGXFSZ for a runaway output file.)
bool crashed(const sandbox::SandboxResult& result) {
  if (result.timed_out) return false;
  switch (result.term_signal) {
    case SIGSEGV:
    case SIGBUS:
    case SIGILL:
    case SIGABRT:
    case SIGFPE: return true;
    default: return false;
  }
}

Status write_sources(const std::string& dir, const proto::FileMap& sources) {
  for (const auto& [name, content] : sources) {
    const std::string path = dir + "/" + name;
    KILN_RETURN_IF_ERROR(make_dirs(std::filesystem::path(path).parent_path().string()));
    KILN_RETURN_IF_ERROR(write_file(path, content.data));
  }
  // Kiln's own headers last: a package file of the same name does not replace them.
  KILN_RETURN_IF_ERROR(make_dirs(dir + "/kiln"));
  KILN_RETURN_IF_ERROR(write_file(dir + "/" + std::string(kAbiHeaderPath), std::string(kernel_abi_header())));
  KILN_RETURN_IF_ERROR(write_file(dir + "/" + std::string(kLeanPreludePath), std::string(lean_prelude())));
  return Status::ok();
}

std::string read_head(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string text(max_bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(max_bytes));
  text.resize(static_cast<size_t>(in.gcount()));
  if (in.peek() != std::char_traits<char>::eof()) text += "\n[... the rest of " + path + " dropped]\n";
  return text;
}

void append_step_output(const std::string& dir, std::string& out, std::string& err) {
  for (const auto& step : nvcc_graph_steps()) {
    const std::string at = dir + "/" + std::string(kKeepDir) + "/" + step;
    out += read_head(at + ".out", kMaxCompilerOutputBytes);
    err += read_head(at + ".err", kMaxCompilerOutputBytes);
  }
}

void record_usage(proto::BuildInfo& info, const PtxasUsage& usage) {
  info.registers = usage.registers;
  info.shared_bytes = usage.shared_bytes;
  info.spill_bytes = usage.spill_bytes;
  info.stack_bytes = usage.stack_bytes;
}

}  // namespace detail
}  // namespace kiln::compiler
