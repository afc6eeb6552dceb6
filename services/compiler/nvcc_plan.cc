// nvcc's steps, planned once from a dry run and run as a graph (kiln/compiler/nvcc_graph.h), or nvcc
// itself: how a build's compiler runs.
#include <algorithm>
#include <cctype>
#include <mutex>

#include "build_steps.h"
#include "kiln/compiler/handler.h"
#include "kiln/compiler/nvcc_graph.h"
#include "kiln/core/files.h"
#include "spdlog/spdlog.h"

namespace kiln::compiler {

using namespace detail;

namespace {

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

}  // namespace

Result<NvccPlan> CompileHandler::nvcc_plan(const std::vector<std::string>& flags, const std::string& source_name) {
  const std::string key = join(flags) + "\n" + source_name;
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  }
  auto plan = plan_by_dry_run(flags, source_name);
  if (!plan.is_ok()) spdlog::warn("compiler: nvcc runs its steps itself ({})", plan.status().message());
  std::lock_guard<std::mutex> lock(plans_mu_);
  return plans_.emplace(key, std::move(plan)).first->second;
}

Result<NvccPlan> CompileHandler::plan_by_dry_run(const std::vector<std::string>& flags,
                                                 const std::string& source_name) {
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
}

Result<sandbox::SandboxResult> CompileHandler::run_compiler(proto::Backend backend, const std::string& dir,
                                                            const std::string& source_name,
                                                            const std::vector<std::string>& base,
                                                            const std::map<std::string, std::string>& defines,
                                                            const std::string& key) {
  const std::string compiler = backend == proto::Backend::kCuda ? options_.nvcc : options_.cxx;
  sandbox::SandboxOptions run = compiler_run(compiler, dir, options_);
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

}  // namespace kiln::compiler
