#include "kiln/compiler/handler.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <csignal>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "kiln/core/cpus.h"
#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/core/strings.h"
#include "kiln/compiler/batch.h"
#include "kiln/compiler/lean_headers.h"
#include "kiln/compiler/nvcc_graph.h"
#include "kiln/messaging/outcome.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/task/task.h"
#include "spdlog/spdlog.h"

namespace kiln::compiler {
namespace {

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

namespace {

// The flags of a build but its -D flags.
std::vector<std::string> base_flags(proto::Backend backend, const std::string& arch) {
  std::vector<std::string> flags;
  if (backend == proto::Backend::kCuda) {
    // Machine code for the target and its PTX embedded beside it, so a newer GPU can still JIT the kernel;
    // the shared runtime, so that the kernel and kiln-eval-cuda share one runtime and its error state.
    flags = {"-O3",     "-shared", "-Xcompiler", "-fPIC", "-gencode", cuda_gencode(arch),
             "-cudart", "shared",  "-Xptxas",    "-v",    "-I."};
  } else {
    flags = {"-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-I."};
  }
  return flags;
}

std::vector<std::string> define_flags(const std::map<std::string, std::string>& defines) {
  std::vector<std::string> flags;
  for (const auto& [k, v] : defines) flags.push_back("-D" + k + "=" + v);
  return flags;
}

// The -D flags the way nvcc's dry run writes them into its preprocessing commands ("-D \"K=V\"").
std::string dryrun_defines(const std::map<std::string, std::string>& defines) {
  std::string out;
  for (const auto& [k, v] : defines) out += (out.empty() ? "" : " ") + std::string("-D \"") + k + "=" + v + "\"";
  return out;
}

bool plain_file_name(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/')) return false;
  }
  return true;
}

// At most `max_bytes` of a file (a step's output; the rest is dropped and said so), "" when it is absent.
std::string read_head(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string text(max_bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(max_bytes));
  text.resize(static_cast<size_t>(in.gcount()));
  if (in.peek() != std::char_traits<char>::eof()) text += "\n[... the rest of " + path + " dropped]\n";
  return text;
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : " ") + p;
  return s;
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

// Whether the compiler driver that runs `link` (its first word) links with gold: it says so when asked
// for the linker's version through -fuse-ld=gold.
bool links_with_gold(const std::string& link, const std::string& scratch, std::vector<std::string> env) {
  const std::string driver = link.substr(0, link.find(' '));
  if (driver.empty()) return false;
  sandbox::SandboxOptions run;
  run.argv = {"/bin/sh", "-c", "exec \"$0\" -fuse-ld=gold -Wl,--version", driver};
  run.working_dir = scratch;
  run.env = std::move(env);
  run.timeout_s = 30;
  auto result = sandbox::run_sandboxed(run);
  return result.is_ok() && result->succeeded() && result->stdout_text.find("GNU gold") != std::string::npos;
}

std::optional<int64_t> parse_int(std::string_view digits) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return v;
}

// The number written right before `suffix` in `line` ("1024 bytes smem" -> 1024).
std::optional<int64_t> number_before(std::string_view line, std::string_view suffix) {
  size_t at = line.find(suffix);
  if (at == std::string_view::npos) return std::nullopt;
  size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  return parse_int(line.substr(begin, end - begin));
}

// The number right after `prefix` in `line` ("Used 32 registers" -> 32).
std::optional<int64_t> number_after(std::string_view line, std::string_view prefix) {
  size_t at = line.find(prefix);
  if (at == std::string_view::npos) return std::nullopt;
  size_t begin = at + prefix.size();
  size_t end = begin;
  while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end]))) ++end;
  return parse_int(line.substr(begin, end - begin));
}

void keep_max(int64_t& target, std::optional<int64_t> v) {
  if (v && *v > target) target = *v;
}

// The compiler driver itself crashed: a fault of the toolchain, not of the source it was given. (The
// limits the sandbox enforces end a run otherwise: a timeout, SIGXFSZ for a runaway output file.)
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

// A build folder: the ABI header and the sources (names checked by task::parse_task: relative, no "..").
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

// What nvcc would have printed for the graph that ran in `dir`: each step's output, in nvcc's order.
void append_step_output(const std::string& dir, std::string& out, std::string& err) {
  for (const auto& step : nvcc_graph_steps()) {
    const std::string at = dir + "/" + std::string(kKeepDir) + "/" + step;
    out += read_head(at + ".out", kMaxCompilerOutputBytes);
    err += read_head(at + ".err", kMaxCompilerOutputBytes);
  }
}

std::string shell_quote(const std::string& v) {
  std::string q = "'";
  for (char c : v) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

PtxasUsage parse_ptxas_usage(std::string_view log) {
  PtxasUsage u;
  bool any_function = false;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t eol = log.find('\n', pos);
    std::string_view line = log.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    pos = eol == std::string_view::npos ? log.size() : eol + 1;

    if (auto regs = number_after(line, "Used "); regs && line.find(" registers") != std::string_view::npos) {
      any_function = true;
      keep_max(u.registers, regs);
      keep_max(u.shared_bytes, number_before(line, " bytes smem"));
    }
    if (line.find("bytes stack frame") != std::string_view::npos) {
      any_function = true;
      keep_max(u.stack_bytes, number_before(line, " bytes stack frame"));
      auto stores = number_before(line, " bytes spill stores");
      auto loads = number_before(line, " bytes spill loads");
      if (stores || loads) keep_max(u.spill_bytes, stores.value_or(0) + loads.value_or(0));
    }
  }
  // ptxas leaves out what a kernel does not use: once it has described a kernel, absent means zero.
  if (any_function) {
    for (int64_t* v : {&u.registers, &u.shared_bytes, &u.spill_bytes, &u.stack_bytes}) *v = std::max<int64_t>(*v, 0);
  }
  return u;
}

std::string trim_log(std::string_view log, size_t max_bytes) {
  // Lines of context kept before the first error ("In function ...", "In file included from ...").
  constexpr int kContextLines = 2;
  std::string_view kept = log;
  size_t skipped = 0;
  if (log.size() > max_bytes) {
    size_t err = log.find("error");
    if (err != std::string_view::npos) {
      size_t start = log.rfind('\n', err);
      start = start == std::string_view::npos ? 0 : start;
      for (int i = 0; i < kContextLines && start > 0; ++i) {
        size_t prev = log.rfind('\n', start - 1);
        start = prev == std::string_view::npos ? 0 : prev;
      }
      if (start > 0) ++start;  // past the newline
      skipped = start;
      kept = log.substr(start);
    }
  }
  std::string out;
  if (skipped > 0) out = "[... " + std::to_string(skipped) + " bytes before the first error dropped]\n";
  if (kept.size() + out.size() <= max_bytes) return out + std::string(kept);
  size_t budget = max_bytes > out.size() ? max_bytes - out.size() : 0;
  size_t cut = kept.rfind('\n', budget);
  if (cut == std::string_view::npos || cut == 0) cut = budget;
  out += kept.substr(0, cut);
  out += "\n[... " + std::to_string(kept.size() - cut) + " bytes dropped]";
  return out;
}

CompilerOptions options_from_config(const config::CompilerConfig& config, const std::string& state_dir) {
  CompilerOptions o;
  o.cache_dir = std::filesystem::path(config.cache_dir).is_absolute() || state_dir.empty()
                    ? config.cache_dir
                    : (std::filesystem::path(state_dir) / config.cache_dir).string();
  o.timeout_s = config.timeout_s;
  o.cxx = config.cxx;
  o.nvcc = config.nvcc;
  o.cuda_arch = config.cuda_arch;
  o.nvcc_mode = config.nvcc_mode;
  o.huge_pages = config.huge_pages == "on";
  o.lean_headers = config.lean_headers == "on";
  o.max_log_bytes = config.max_log_bytes;
  // A batch needs builds that arrive together: a compiler of one slot never has two.
  o.batch_max = config.slots > 1 ? config.batch_max : 1;
  o.batch_window_s = static_cast<double>(config.batch_window_ms) / 1000.0;
  o.batch_cores = config.batch_cores;
  return o;
}

CompileHandler::CompileHandler(CompilerOptions options, std::shared_ptr<prometheus::Registry> metrics)
    : options_(std::move(options)), metrics_(std::move(metrics)) {
  cores_ = options_.batch_cores > 0 ? static_cast<int>(options_.batch_cores) : allowed_core_count();
  cache_hits_ = &prometheus::BuildCounter()
                     .Name("kiln_compile_cache_hits_total")
                     .Help("Builds served from the content-addressed compile cache")
                     .Register(*metrics_)
                     .Add({});
  graph_fallbacks_ = &prometheus::BuildCounter()
                          .Name("kiln_compile_nvcc_graph_fallbacks_total")
                          .Help("CUDA builds whose steps failed as a graph and were run again by nvcc itself")
                          .Register(*metrics_)
                          .Add({});
  batched_ = &prometheus::BuildCounter()
                  .Name("kiln_compile_batched_builds_total")
                  .Help("CUDA builds made as one variant of a batch: one translation unit for several parameter sets")
                  .Register(*metrics_)
                  .Add({});
  batch_fallbacks_ = &prometheus::BuildCounter()
                          .Name("kiln_compile_batch_fallbacks_total")
                          .Help("Batches that did not build, whose variants were then built alone")
                          .Register(*metrics_)
                          .Add({});
}

Result<std::unique_ptr<CompileHandler>> CompileHandler::create(const CompilerOptions& options,
                                                               std::shared_ptr<prometheus::Registry> metrics) {
  if (options.cache_dir.empty()) return invalid_argument("compiler: cache_dir is empty");
  if (!(options.timeout_s > 0)) return invalid_argument("compiler: timeout_s must be positive");
  if (options.max_log_bytes <= 0) return invalid_argument("compiler: max_log_bytes must be positive");
  if (options.batch_max < 1 || options.batch_max > 64) return invalid_argument("compiler: batch_max must be 1-64");
  if (!(options.batch_window_s >= 0) || options.batch_window_s > 10)
    return invalid_argument("compiler: batch_window_s must be 0-10");
  if (options.batch_cores < 0 || options.batch_cores > 4096)
    return invalid_argument("compiler: batch_cores must be 0-4096");
  if (options.nvcc_mode != "graph" && options.nvcc_mode != "serial") {
    return invalid_argument("compiler: nvcc_mode must be graph or serial, not '" + options.nvcc_mode + "'");
  }
  KILN_RETURN_IF_ERROR(make_dirs(options.cache_dir).with_context("compiler: cache_dir"));
  if (!metrics) metrics = std::make_shared<prometheus::Registry>();
  return std::unique_ptr<CompileHandler>(new CompileHandler(options, std::move(metrics)));
}

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

Result<CompileHandler::Build> CompileHandler::build(proto::Backend backend, const std::string& arch,
                                                    const proto::FileMap& files, const std::string& source_name,
                                                    const std::string& source,
                                                    const std::map<std::string, std::string>& defines, bool may_batch) {
  KILN_ASSIGN_OR_RETURN(std::string version, toolchain(backend));
  const std::string compiler = backend == proto::Backend::kCuda ? options_.nvcc : options_.cxx;
  // Everything that can change the binary: the package's sources and headers (not its task.yaml or notes),
  // the source being built, the ABI header, the flags and the exact toolchain.
  proto::FileMap sources = files;
  sources.erase("task.yaml");
  sources.erase("instructions.md");
  sources[source_name] = proto::Bytes{source};
  std::map<std::string, std::string> plain;
  for (const auto& [name, content] : sources) plain[name] = content.data;

  std::vector<std::string> base = base_flags(backend, arch);
  if (options_.lean_headers && backend == proto::Backend::kCuda) {
    for (auto& f : lean_header_flags(lean_headers(plain, defines))) base.push_back(std::move(f));
  }
  std::vector<std::string> flags = base;
  for (auto& d : define_flags(defines)) flags.push_back(std::move(d));
  const std::string flags_text = join(flags);
  const std::string files_hash = hash_files(plain);
  auto content_key = [&](std::string_view flags_part) {
    Sha256 h;
    for (std::string_view part :
         {kCacheVersion, proto::name(backend), std::string_view(compiler), flags_part, std::string_view(version),
          kernel_abi_header(), std::string_view(source_name), std::string_view(files_hash)}) {
      h.update_field(part);
    }
    return h.hex_digest();
  };
  const std::string key = content_key(flags_text);
  auto cache_base = [&](const std::string& k) { return options_.cache_dir + "/" + k.substr(0, 2) + "/" + k; };
  auto cached = [&](const std::string& k) -> std::optional<Build> {
    auto so = read_file(cache_base(k) + ".so");
    if (!so.is_ok()) return std::nullopt;
    auto info_bytes = read_file(cache_base(k) + ".build");
    if (!info_bytes.is_ok()) return std::nullopt;
    auto info = proto::decode<proto::BuildInfo>(*info_bytes);
    if (!info.is_ok() || !info->ok) return std::nullopt;
    Build hit;
    hit.info = std::move(info).value();
    hit.info.cache_hit = true;
    hit.so = std::move(so).value();
    cache_hits_->Increment();
    return hit;
  };
  auto keep = [&](const std::string& k, const Build& b) {
    Status st = make_dirs(options_.cache_dir + "/" + k.substr(0, 2));
    if (st.is_ok()) st = write_file_atomic(cache_base(k) + ".so", b.so);
    if (st.is_ok()) st = write_file_atomic(cache_base(k) + ".build", proto::encode(b.info));
    if (!st.is_ok()) spdlog::warn("compile cache: {}", st.message());
  };
  if (auto hit = cached(key)) return std::move(*hit);

  // A batch-built variant is kept under a key of its own: a build that must be alone (a confirmation's)
  // never finds it. A batch groups the builds whose key differs only in the defines.
  auto params = [&] {
    std::vector<std::string> names;
    for (const auto& [name, value] : defines) names.push_back(name);
    return names;
  };
  if (may_batch && backend == proto::Backend::kCuda && options_.batch_max > 1 && batchable(source, params()).is_ok()) {
    const std::string batch_key = sha256_hex(key + "/batched");
    if (auto hit = cached(batch_key)) return std::move(*hit);
    if (auto batched = build_in_batch(content_key(join(base)), sources, source_name, source, base, version, defines)) {
      keep(batch_key, *batched);
      return std::move(*batched);
    }
  }

  Build out;

  TempDir scratch("kiln-compile");
  KILN_RETURN_IF_ERROR(write_sources(scratch.path(), sources));

  KILN_ASSIGN_OR_RETURN(sandbox::SandboxResult result,
                        run_compiler(backend, scratch.path(), source_name, base, defines, key));

  std::string out_text = result.stdout_text;
  std::string err_text = result.stderr_text;
  replace_all(out_text, scratch.path() + "/", "");
  replace_all(err_text, scratch.path() + "/", "");
  std::string log = out_text + err_text;
  const size_t max_log = static_cast<size_t>(options_.max_log_bytes);
  const auto [out_budget, err_budget] = proto::stream_budgets(out_text.size(), err_text.size(), max_log);
  out.info.process.returncode = result.returncode();
  out.info.process.stdout_text = trim_log(out_text, out_budget);
  out.info.process.stderr_text = trim_log(err_text, err_budget);
  if (!result.succeeded()) out.info.process.message = result.describe(options_.timeout_s);
  out.info.compiler = backend == proto::Backend::kCuda ? "nvcc" : "g++";
  out.info.flags = flags_text;
  out.info.toolchain = version;
  out.info.duration_s = result.wall_s;
  out.timed_out = result.timed_out;
  if (result.timed_out) log = "compile timed out after " + sandbox::format_seconds(options_.timeout_s) + "\n" + log;
  out.info.log = trim_log(log, max_log);
  if (backend == proto::Backend::kCuda) {
    PtxasUsage usage = parse_ptxas_usage(log);
    out.info.registers = usage.registers;
    out.info.shared_bytes = usage.shared_bytes;
    out.info.spill_bytes = usage.spill_bytes;
    out.info.stack_bytes = usage.stack_bytes;
  }
  if (crashed(result)) {
    return unavailable(compiler + " " + result.describe(options_.timeout_s) + " building " + source_name + ":\n" +
                       trim_log(log, kMaxRetryLogBytes));
  }
  if (!result.succeeded()) return out;
  auto so = read_file(scratch.path() + "/" + std::string(kOutputName));
  if (!so.is_ok()) {
    return unavailable(compiler + " exited 0 but wrote no shared object for " + source_name + ": " +
                       so.status().message());
  }
  out.so = std::move(so).value();
  out.info.ok = true;
  out.info.kernel_sha256 = sha256_hex(out.so);

  keep(key, out);
  return out;
}

Result<NvccPlan> CompileHandler::nvcc_plan(const std::vector<std::string>& flags, const std::string& source_name) {
  const std::string key = join(flags) + "\n" + source_name;
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  }
  auto plan = [&]() -> Result<NvccPlan> {
    if (!plain_file_name(source_name)) return failed_precondition("the source's name needs quoting: " + source_name);
    TempDir dir("kiln-nvcc-plan");
    sandbox::SandboxOptions run;
    run.argv = {options_.nvcc};
    run.argv.insert(run.argv.end(), flags.begin(), flags.end());
    run.argv.insert(run.argv.end(), {"-D", std::string(kDefinesMark), "-o", std::string(kOutputName), source_name,
                                     "-dryrun", "-keep", "-keep-dir", std::string(kKeepDir)});
    run.working_dir = dir.path();
    run.env = compiler_env(options_.nvcc, dir.path(), options_.huge_pages);
    run.timeout_s = kDryRunTimeoutS;
    KILN_ASSIGN_OR_RETURN(sandbox::SandboxResult result, sandbox::run_sandboxed(run));
    if (!result.succeeded()) return unavailable("nvcc -dryrun: " + result.describe(run.timeout_s));
    KILN_ASSIGN_OR_RETURN(NvccPlan parsed, parse_nvcc_dryrun(result.stderr_text, std::string(kKeepDir)));
    const std::string mark = "-D \"" + std::string(kDefinesMark) + "\"";
    if (parsed.host_preprocess.find(mark) == std::string::npos ||
        parsed.device_preprocess.find(mark) == std::string::npos) {
      return failed_precondition("nvcc dry run: the -D flags are not where they were expected");
    }
    // The link is the last step of the host side, the build's longest path: gold links these small shared
    // objects in a third of ld.bfd's time (31 against 85 ms on the H200 host). Where the host's compiler
    // driver cannot use it, nvcc's own link stays.
    if (links_with_gold(parsed.link, dir.path(), run.env)) parsed.link += " -fuse-ld=gold";
    return rewrite_plan(rewrite_plan(parsed, mark, kDefinesMark), dir.path(), kBuildDirMark);
  }();
  if (!plan.is_ok()) spdlog::warn("compiler: nvcc runs its steps itself ({})", plan.status().message());
  std::lock_guard<std::mutex> lock(plans_mu_);
  return plans_.emplace(key, std::move(plan)).first->second;
}

Result<sandbox::SandboxResult> CompileHandler::run_compiler(proto::Backend backend, const std::string& dir,
                                                            const std::string& source_name,
                                                            const std::vector<std::string>& base,
                                                            const std::map<std::string, std::string>& defines,
                                                            const std::string& key) {
  const std::string compiler = backend == proto::Backend::kCuda ? options_.nvcc : options_.cxx;
  sandbox::SandboxOptions run;
  run.working_dir = dir;
  run.env = compiler_env(compiler, dir, options_.huge_pages);
  run.timeout_s = options_.timeout_s;
  run.file_size_bytes = kMaxOutputFileBytes;
  run.max_output_bytes = kMaxCompilerOutputBytes;

  double graph_s = 0;
  if (backend == proto::Backend::kCuda && options_.nvcc_mode == "graph") {
    if (auto plan = nvcc_plan(base, source_name); plan.is_ok()) {
      NvccPlan p = rewrite_plan(rewrite_plan(*plan, kDefinesMark, dryrun_defines(defines)), kBuildDirMark, dir);
      NvccGraphFiles graph = nvcc_graph(p, nvcc_module_id(key, source_name));
      KILN_RETURN_IF_ERROR(make_dirs(dir + "/" + std::string(kKeepDir)));
      for (const auto& [name, content] : graph.files) KILN_RETURN_IF_ERROR(write_file(dir + "/" + name, content));
      const std::string script = std::string(kKeepDir) + "/kiln-steps.sh";
      KILN_RETURN_IF_ERROR(write_file(dir + "/" + script, graph.script));
      run.argv = {"/bin/sh", script};
      auto steps = sandbox::run_sandboxed(run);
      if (steps.is_ok() && (steps->succeeded() || steps->timed_out)) {
        append_step_output(dir, steps->stdout_text, steps->stderr_text);
        return steps;
      }
      // A step failed (or the shell did not start): nvcc itself says what and how, in its own words, with
      // the time that is left.
      graph_fallbacks_->Increment();
      if (!steps.is_ok()) spdlog::warn("compiler: nvcc's steps did not start: {}", steps.status().message());
      graph_s = steps.is_ok() ? steps->wall_s : 0;
      run.timeout_s = std::max(1.0, options_.timeout_s - graph_s);
    }
  }
  run.argv = {compiler};
  run.argv.insert(run.argv.end(), base.begin(), base.end());
  for (auto& d : define_flags(defines)) run.argv.push_back(std::move(d));
  run.argv.insert(run.argv.end(), {"-o", std::string(kOutputName), source_name});
  KILN_ASSIGN_OR_RETURN(sandbox::SandboxResult result, sandbox::run_sandboxed(run));
  result.wall_s += graph_s;
  return result;
}

std::optional<CompileHandler::Build> CompileHandler::build_in_batch(
    const std::string& group_key, const proto::FileMap& sources, const std::string& source_name,
    const std::string& source, const std::vector<std::string>& base, const std::string& version,
    const std::map<std::string, std::string>& defines) {
  BatchMember me;
  me.defines = defines;
  // How many builds a batch should hold on average with the builds in flight now. An open batch grows to
  // the whole part of it as builds arrive: builds that finish together come back together, and the first
  // of them sees few in flight.
  const double cores_per_build = options_.nvcc_mode == "graph" ? kGraphCoresPerBuild : 1.0;
  auto share = [&] { return batch_share(in_flight_.load(), cores_, cores_per_build, options_.batch_max); };
  std::unique_lock lock(batch_mu_);
  if (auto open = open_batches_.find(group_key); open != open_batches_.end()) {
    BatchGroup& g = *open->second;
    g.capacity = std::max(g.capacity, BatchSizer::whole(share()));
    if (g.members.size() < g.capacity) {
      g.members.push_back(&me);
      if (g.members.size() == g.capacity) batch_cv_.notify_all();  // the opener need not wait longer
      batch_cv_.wait(lock, [&] { return me.done; });
      return std::move(me.build);
    }
  }

  // This build opens the batch: the others that arrive within the window join it. A build alone in this
  // compiler has nobody to wait for, and while the builds in flight fit the cores each is faster alone.
  const size_t capacity = sizer_.next(share());
  if (capacity < 2) return std::nullopt;
  auto group = std::make_shared<BatchGroup>();
  group->capacity = capacity;
  group->members.push_back(&me);
  open_batches_[group_key] = group;
  batch_cv_.wait_for(lock, std::chrono::duration<double>(options_.batch_window_s),
                     [&] { return group->members.size() >= group->capacity; });
  if (auto open = open_batches_.find(group_key); open != open_batches_.end() && open->second == group)
    open_batches_.erase(open);
  const std::vector<BatchMember*> members = group->members;  // closed: nobody joins any more
  lock.unlock();
  if (members.size() == 1) return std::nullopt;

  std::vector<std::optional<Build>> built;
  try {
    std::vector<std::map<std::string, std::string>> variants;
    for (const BatchMember* m : members) variants.push_back(m->defines);
    built = run_batch(sources, source_name, source, base, version, variants);
    const auto made = std::count_if(built.begin(), built.end(), [](const auto& b) { return b.has_value(); });
    if (made > 0) spdlog::info("compiler: batch of {}: {} builds of {} as one unit", members.size(), made, source_name);
  } catch (const std::exception& e) {
    spdlog::warn("compiler: a batch of {} failed: {}", members.size(), e.what());
  }
  built.resize(members.size());
  lock.lock();
  for (size_t i = 1; i < members.size(); ++i) {
    members[i]->build = std::move(built[i]);
    members[i]->done = true;
  }
  lock.unlock();
  batch_cv_.notify_all();
  return std::move(built[0]);
}

std::vector<std::optional<CompileHandler::Build>> CompileHandler::run_batch(
    const proto::FileMap& sources, const std::string& source_name, const std::string& source,
    const std::vector<std::string>& base, const std::string& version,
    const std::vector<std::map<std::string, std::string>>& variants) {
  const size_t n = variants.size();
  std::vector<std::optional<Build>> out(n);
  auto give_up = [&](const std::string& why) {
    batch_fallbacks_->Increment();
    spdlog::info("compiler: a batch of {} variants of {} is built alone instead: {}", n, source_name, why);
    return std::vector<std::optional<Build>>(n);
  };
  TempDir scratch("kiln-compile-batch");
  const std::string dir = scratch.path();
  Status st = write_sources(dir, sources);
  const std::string unit = "kiln-batch.cu";
  const std::string unit_text = batch_unit(source_name, source, variants);
  for (const auto& [name, content] : sources) {
    if (st.is_ok() && name.starts_with("kiln-")) st = failed_precondition("the package has a file named " + name);
  }
  if (st.is_ok() && source_name.find_first_of("\"\\\n") != std::string::npos)
    st = failed_precondition("the source's name cannot be #included as it is");
  if (st.is_ok()) st = write_file(dir + "/" + unit, unit_text);
  for (size_t i = 0; st.is_ok() && i < n; ++i)
    st = write_file(dir + "/kiln-stub" + std::to_string(i) + ".c", variant_stub(i));
  if (!st.is_ok()) return give_up(st.message());

  // One nvcc for the object (every variant's kernels), then per variant a shared object of that object
  // and its stub, linked by nvcc as a build alone is (-shared, -cudart shared); in graph mode, nvcc's steps.
  std::string object_flags, link_flags;
  for (const auto& f : base) {
    if (f != "-shared") object_flags += " " + shell_quote(f);
    link_flags += " " + shell_quote(f);
  }
  // The links run side by side: each is a few small tools, and together they are most of a batch's tail.
  std::string script =
      shell_quote(options_.nvcc) + object_flags + " -c -o kiln-batch.o " + unit + " || exit 1\npids=\n";
  std::vector<std::string> links;
  for (size_t i = 0; i < n; ++i) {
    const std::string si = std::to_string(i);
    links.push_back(shell_quote(options_.nvcc) + link_flags + " -o kiln-v" + si + ".so kiln-batch.o kiln-stub" + si +
                    ".c");
  }
  // In graph mode the batch's steps run as a build's do (kiln/compiler/nvcc_graph.h), all but the link:
  // each variant links the graph's objects with its stub, compiled by the host compiler.
  bool as_graph = false;
  if (options_.nvcc_mode == "graph") {
    if (auto plan = nvcc_plan(base, unit); plan.is_ok()) {
      NvccPlan p = rewrite_plan(rewrite_plan(*plan, kDefinesMark, ""), kBuildDirMark, dir);
      const std::string output = "-o \"" + std::string(kOutputName) + "\"";
      const size_t at = p.link.find(output);
      if (at != std::string::npos && p.link.find(output, at + 1) == std::string::npos) {
        const std::string link = p.link;
        p.link = ":";
        NvccGraphFiles graph = nvcc_graph(p, nvcc_module_id(sha256_hex(unit_text), unit));
        st = make_dirs(dir + "/" + std::string(kKeepDir));
        for (const auto& [name, content] : graph.files)
          if (st.is_ok()) st = write_file(dir + "/" + name, content);
        const std::string steps = std::string(kKeepDir) + "/kiln-steps.sh";
        if (st.is_ok()) st = write_file(dir + "/" + steps, graph.script);
        if (!st.is_ok()) return give_up(st.message());
        script = "/bin/sh " + steps + " || exit 1\npids=\n";
        for (size_t i = 0; i < n; ++i) {
          const std::string si = std::to_string(i);
          std::string variant_link = link;
          variant_link.replace(at, output.size(), "kiln-stub" + si + ".o -o kiln-v" + si + ".so");
          links[i] = p.host_compiler + " -c -fPIC -o kiln-stub" + si + ".o kiln-stub" + si + ".c && " + variant_link;
        }
        as_graph = true;
      }
    }
  }
  for (size_t i = 0; i < n; ++i)
    script += "{ " + links[i] + "; } > kiln-link" + std::to_string(i) + ".log 2>&1 &\npids=\"$pids $!\"\n";
  script += "failed=0\nfor p in $pids; do wait $p || failed=1; done\nexit $failed\n";
  sandbox::SandboxOptions run;
  run.working_dir = dir;
  run.env = compiler_env(options_.nvcc, dir, options_.huge_pages);
  run.timeout_s = options_.timeout_s;
  run.file_size_bytes = kMaxOutputFileBytes;
  run.max_output_bytes = kMaxCompilerOutputBytes;
  run.argv = {"/bin/sh", "-c", script};
  auto result = sandbox::run_sandboxed(run);
  if (!result.is_ok()) return give_up(result.status().message());
  // The compile's output (in graph mode, each step's as nvcc would have printed it) and each link's.
  std::string compile_log = result->stdout_text + result->stderr_text;
  if (as_graph) append_step_output(dir, compile_log, compile_log);
  replace_all(compile_log, dir + "/", "");
  std::vector<std::string> link_logs(n);
  for (size_t i = 0; i < n; ++i) {
    link_logs[i] = read_head(dir + "/kiln-link" + std::to_string(i) + ".log", kMaxCompilerOutputBytes);
    replace_all(link_logs[i], dir + "/", "");
  }
  if (!result->succeeded()) {
    std::string log = compile_log;
    for (const auto& l : link_logs) log += l;
    return give_up(result->describe(run.timeout_s) + "\n" + trim_log(log, kMaxRetryLogBytes));
  }
  const std::vector<std::string> ptxas = ptxas_log_by_variant(compile_log, n);
  for (size_t i = 0; i < n; ++i) {
    auto so = read_file(dir + "/kiln-v" + std::to_string(i) + ".so");
    if (!so.is_ok()) return give_up(so.status().message());
    Build& b = out[i].emplace();
    b.so = std::move(so).value();
    std::vector<std::string> flags = base;
    for (auto& d : define_flags(variants[i])) flags.push_back(std::move(d));
    b.info.ok = true;
    b.info.compiler = "nvcc";
    b.info.flags = join(flags);
    b.info.toolchain = version;
    b.info.duration_s = result->wall_s;
    b.info.process.returncode = 0;
    const std::string variant_log = "built as variant " + std::to_string(i + 1) + " of " + std::to_string(n) +
                                    " in one translation unit (one build, several parameter sets)\n" + ptxas[i] +
                                    link_logs[i];
    b.info.process.stderr_text = trim_log(variant_log, static_cast<size_t>(options_.max_log_bytes));
    b.info.log = b.info.process.stderr_text;
    const PtxasUsage usage = parse_ptxas_usage(ptxas[i]);
    b.info.registers = usage.registers;
    b.info.shared_bytes = usage.shared_bytes;
    b.info.spill_bytes = usage.spill_bytes;
    b.info.stack_bytes = usage.stack_bytes;
    b.info.kernel_sha256 = sha256_hex(b.so);
  }
  batched_->Increment(static_cast<double>(n));
  return out;
}

messaging::JobOutcome CompileHandler::compile(const proto::CompileRequest& request) {
  ++in_flight_;
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { --n; }
  } leave{in_flight_};
  proto::Candidate cand = request.cand;
  auto score_job = [&](proto::Stage stage, std::string error, proto::BuildInfo build) {
    proto::ScoreResult result;
    result.cand = cand;
    result.stage = std::string(proto::name(stage));
    result.error = std::move(error);
    result.build = std::move(build);
    return std::vector<proto::FollowUp>{proto::FollowUp{
        std::string(proto::svc::kScore), proto::job_id::score(cand.program_id), {proto::encode(result)}, 0}};
  };
  // Every early end is a Status that says whose fault it is, read by messaging::outcome_for: the candidate's
  // is scored (at `stage`, with `score_error` when the scorer should see more than the one line, e.g. the
  // build log); a permanent fault of the task or the request is dead-lettered; this worker's is given back.
  auto end = [&](const Status& fault, proto::Stage stage = proto::Stage::kCompile, proto::BuildInfo build = {},
                 std::string score_error = {}) {
    return messaging::JobOutcome::from_status(fault.with_context("compile"), [&](const Status&) {
      return score_job(stage, score_error.empty() ? fault.message() : std::move(score_error), std::move(build));
    });
  };

  auto package = tasks_->resolve(request.task_blob, request.files);
  if (!package.is_ok()) return end(package.status());
  const proto::FileMap& files = (*package)->files;
  const task::TaskSpec* spec = &(*package)->spec;
  // Every proposal's code passes here before anything is built, whoever proposed it (tuner, LLM, an
  // external bridge's compile job): the task's kernel outside the editable regions is Kiln's. A proposal
  // that changed it, or whose region bodies do not fit, is scored as no code (stage "propose").
  auto accepted = task::accept_proposal(files.at(spec->kernel_file).data, cand.code, cand.regions);
  if (!accepted.is_ok()) return end(messaging::candidate_fault(accepted.status()), proto::Stage::kPropose);
  cand.code = std::move(accepted).value();
  cand.regions.clear();
  const proto::Backend backend = spec->backend;
  if (!request.backend.empty() && !proto::is_backend(request.backend, backend)) {
    return end(failed_precondition("the request is for backend '" + request.backend + "' but the task's is '" +
                                   std::string(proto::name(backend)) + "'"));
  }
  for (const auto& [name, value] : cand.params) {
    if (!is_identifier(name)) return end(invalid_argument("parameter '" + name + "': not an identifier"));
    if (!is_define_value(value)) {
      return end(invalid_argument("parameter " + name + ": value '" + value + "' is not allowed"));
    }
  }
  const std::string arch = backend == proto::Backend::kCuda && !request.arch.empty() && request.arch != "native"
                               ? request.arch
                               : options_.cuda_arch;

  // The reference is built first: what goes wrong with it is never the candidate's. A reference that does
  // not compile will not compile on the next attempt either; one that ran out of time may, on a less busy
  // machine.
  auto reference = build(backend, arch, files, spec->reference_file, files.at(spec->reference_file).data, {});
  if (!reference.is_ok()) return end(messaging::worker_fault(reference.status().with_context("toolchain")));
  if (!reference->info.ok) {
    const std::string why = "the reference failed to build (a problem of the task, not of the candidate):\n" +
                            trim_log(reference->info.log, kMaxRetryLogBytes);
    return end(reference->timed_out ? deadline_exceeded(why) : failed_precondition(why));
  }
  const bool confirmation = proto::program_id::confirmed(cand.program_id).has_value();
  auto kernel = build(backend, arch, files, spec->kernel_file, cand.code, cand.params, !confirmation);
  if (!kernel.is_ok()) return end(messaging::worker_fault(kernel.status().with_context("toolchain")));
  if (!kernel->info.ok) {
    return end(invalid_argument("the candidate does not build: " + kernel->info.process.message),
               proto::Stage::kCompile, kernel->info, kernel->info.log);
  }

  proto::TestRequest test;
  test.cand = cand;
  test.purpose = "eval";
  // The package and the reference go by name when they can (one fetch per tester, not one copy per job).
  test.task_blob = (*package)->blob.empty() ? tasks_->publish(files) : (*package)->blob;
  if (test.task_blob.empty()) test.files = files;
  test.reference_blob = tasks_->publish_bytes(reference->so);
  if (test.reference_blob.empty()) test.reference_so = proto::Bytes{std::move(reference->so)};
  proto::set_kernel_library(test, std::move(kernel->so));
  test.build = kernel->info;
  test.screen_below = request.screen_below;
  test.want_profile = request.want_profile;
  return messaging::JobOutcome::ok({proto::FollowUp{proto::test_service_for(backend),
                                                    proto::job_id::test(cand.program_id),
                                                    {proto::encode(test)},
                                                    0,
                                                    request.avoid_tester}});
}

messaging::JobOutcome CompileHandler::handle(const proto::Job& job) {
  auto request = proto::decode<proto::CompileRequest>(job.payload.data);
  if (!request.is_ok()) {
    return messaging::JobOutcome::from_status(
        messaging::job_fault(request.status()).with_context("compile: bad CompileRequest"));
  }
  try {
    return compile(*request);
  } catch (const std::exception& e) {
    // Out of memory or a full disk on this worker: another attempt, maybe elsewhere, may succeed.
    return messaging::JobOutcome::from_status(
        messaging::worker_fault(internal_error(std::string("compile: ") + e.what())));
  }
}

Result<service::ServiceHandlers> make_compile_handlers(const service::ServiceContext& ctx) {
  if (!ctx.config) return invalid_argument("compiler: no config");
  auto options = options_from_config(ctx.config->compiler, ctx.state_dir);
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<CompileHandler> handler, CompileHandler::create(options, ctx.metrics));
  if (ctx.tasks) handler->set_task_source(ctx.tasks);
  service::ServiceHandlers h;
  h.job = [handler](const proto::Job& job) { return handler->handle(job); };
  h.caps = handler->capabilities();
  if (h.caps.toolchain.empty()) spdlog::warn("compiler: {} does not answer --version", options.cxx);
  h.slots = static_cast<int>(std::max<int64_t>(1, ctx.config->compiler.slots));
  h.service = std::string(proto::svc::kCompile);
  return h;
}

}  // namespace kiln::compiler
