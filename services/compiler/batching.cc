// Builds that share a source and differ only in their -D values, made as one translation unit
// (kiln/compiler/batch.h): who joins a batch, and the batch's one nvcc run and one link per variant.
#include <algorithm>
#include <chrono>
#include <exception>

#include "build_steps.h"
#include "kiln/compiler/batch.h"
#include "kiln/compiler/handler.h"
#include "kiln/compiler/nvcc_graph.h"
#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/core/strings.h"
#include "spdlog/spdlog.h"

namespace kiln::compiler {

using namespace detail;

namespace {

constexpr std::string_view kBatchUnit = "kiln-batch.cu";

// The batch's folder: the package, the unit that holds every variant, and each variant's stub.
Status write_batch(const std::string& dir, const proto::FileMap& sources, const std::string& source_name,
                   const std::string& unit_text, size_t variants) {
  KILN_RETURN_IF_ERROR(write_sources(dir, sources));
  for (const auto& [name, content] : sources) {
    if (name.starts_with("kiln-")) return failed_precondition("the package has a file named " + name);
  }
  if (source_name.find_first_of("\"\\\n") != std::string::npos)
    return failed_precondition("the source's name cannot be #included as it is");
  KILN_RETURN_IF_ERROR(write_file(dir + "/" + std::string(kBatchUnit), unit_text));
  for (size_t i = 0; i < variants; ++i)
    KILN_RETURN_IF_ERROR(write_file(dir + "/kiln-stub" + std::to_string(i) + ".c", variant_stub(i)));
  return Status::ok();
}

// One nvcc for the object (every variant's kernels), then per variant a shared object of that object and
// its stub, linked by nvcc as a build alone is (-shared, -cudart shared).
BatchScript nvcc_batch_script(const std::string& nvcc, const std::vector<std::string>& base, size_t variants) {
  std::string object_flags, link_flags;
  for (const auto& f : base) {
    if (f != "-shared") object_flags += " " + shell_quote(f);
    link_flags += " " + shell_quote(f);
  }
  BatchScript script;
  script.compile = shell_quote(nvcc) + object_flags + " -c -o kiln-batch.o " + std::string(kBatchUnit) + " || exit 1";
  for (size_t i = 0; i < variants; ++i) {
    const std::string si = std::to_string(i);
    script.links.push_back(shell_quote(nvcc) + link_flags + " -o kiln-v" + si + ".so kiln-batch.o kiln-stub" + si +
                           ".c");
  }
  return script;
}

}  // namespace

// The links run side by side: each is a few small tools, and together they are most of a batch's tail.
std::string detail::BatchScript::text() const {
  std::string s = compile + "\npids=\n";
  for (size_t i = 0; i < links.size(); ++i)
    s += "{ " + links[i] + "; } > kiln-link" + std::to_string(i) + ".log 2>&1 &\npids=\"$pids $!\"\n";
  return s + "failed=0\nfor p in $pids; do wait $p || failed=1; done\nexit $failed\n";
}

std::optional<CompileHandler::Build> CompileHandler::build_in_batch(const std::string& group_key,
                                                                    const BuildInputs& in) {
  BatchMember me;
  me.defines = in.defines;
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
  return build_batch_for(in, members);
}

std::optional<CompileHandler::Build> CompileHandler::build_batch_for(const BuildInputs& in,
                                                                     const std::vector<BatchMember*>& members) {
  std::vector<std::optional<Build>> built;
  try {
    std::vector<std::map<std::string, std::string>> variants;
    for (const BatchMember* m : members) variants.push_back(m->defines);
    built = run_batch(in, variants);
    const auto made = std::count_if(built.begin(), built.end(), [](const auto& b) { return b.has_value(); });
    if (made > 0)
      spdlog::info("compiler: batch of {}: {} builds of {} as one unit", members.size(), made, in.source_name);
  } catch (const std::exception& e) {
    spdlog::warn("compiler: a batch of {} failed: {}", members.size(), e.what());
  }
  built.resize(members.size());
  {
    std::lock_guard lock(batch_mu_);
    for (size_t i = 1; i < members.size(); ++i) {
      members[i]->build = std::move(built[i]);
      members[i]->done = true;
    }
  }
  batch_cv_.notify_all();
  return std::move(built[0]);
}

// In graph mode the batch's steps run as a build's do (kiln/compiler/nvcc_graph.h), all but the link: each
// variant links the graph's objects with its stub, compiled by the host compiler. Leaves `script` as it is
// (nvcc's own steps) where the plan does not allow it.
Status CompileHandler::graph_batch_script(const BuildInputs& in, const std::string& dir, const std::string& unit_text,
                                          BatchScript& script) {
  if (options_.nvcc_mode != "graph") return Status::ok();
  auto plan = nvcc_plan(in.base, std::string(kBatchUnit));
  if (!plan.is_ok()) return Status::ok();
  NvccPlan p = rewrite_plan(rewrite_plan(*plan, kDefinesMark, ""), kBuildDirMark, dir);
  const std::string output = "-o \"" + std::string(kOutputName) + "\"";
  const size_t at = p.link.find(output);
  if (at == std::string::npos || p.link.find(output, at + 1) != std::string::npos) return Status::ok();
  const std::string link = p.link;
  p.link = ":";
  NvccGraphFiles graph = nvcc_graph(p, nvcc_module_id(sha256_hex(unit_text), std::string(kBatchUnit)));
  KILN_RETURN_IF_ERROR(make_dirs(dir + "/" + std::string(kKeepDir)));
  for (const auto& [name, content] : graph.files) KILN_RETURN_IF_ERROR(write_file(dir + "/" + name, content));
  const std::string steps = std::string(kKeepDir) + "/kiln-steps.sh";
  KILN_RETURN_IF_ERROR(write_file(dir + "/" + steps, graph.script));
  script.compile = "/bin/sh " + steps + " || exit 1";
  for (size_t i = 0; i < script.links.size(); ++i) {
    const std::string si = std::to_string(i);
    std::string variant_link = link;
    variant_link.replace(at, output.size(), "kiln-stub" + si + ".o -o kiln-v" + si + ".so");
    script.links[i] = p.host_compiler + " -c -fPIC -o kiln-stub" + si + ".o kiln-stub" + si + ".c && " + variant_link;
  }
  script.as_graph = true;
  return Status::ok();
}

std::vector<std::optional<CompileHandler::Build>> CompileHandler::run_batch(
    const BuildInputs& in, const std::vector<std::map<std::string, std::string>>& variants) {
  const size_t n = variants.size();
  auto give_up = [&](const std::string& why) {
    batch_fallbacks_->Increment();
    spdlog::info("compiler: a batch of {} variants of {} is built alone instead: {}", n, in.source_name, why);
    return std::vector<std::optional<Build>>(n);
  };
  TempDir scratch("kiln-compile-batch");
  const std::string dir = scratch.path();
  const std::string unit_text = batch_unit(in.source_name, in.source, variants);
  Status st = write_batch(dir, in.sources, in.source_name, unit_text, n);
  BatchScript script = nvcc_batch_script(options_.nvcc, in.base, n);
  if (st.is_ok()) st = graph_batch_script(in, dir, unit_text, script);
  if (!st.is_ok()) return give_up(st.message());

  sandbox::SandboxOptions run = compiler_run(options_.nvcc, dir, options_);
  run.argv = {"/bin/sh", "-c", script.text()};
  auto result = sandbox::run_sandboxed(run);
  if (!result.is_ok()) return give_up(result.status().message());
  // The compile's output (in graph mode, each step's as nvcc would have printed it) and each link's.
  std::string compile_log = result->stdout_text + result->stderr_text;
  if (script.as_graph) append_step_output(dir, compile_log, compile_log);
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
  std::vector<std::optional<Build>> out(n);
  for (size_t i = 0; i < n; ++i) {
    auto so = read_file(dir + "/kiln-v" + std::to_string(i) + ".so");
    if (!so.is_ok()) return give_up(so.status().message());
    const std::string log = "built as variant " + std::to_string(i + 1) + " of " + std::to_string(n) +
                            " in one translation unit (one build, several parameter sets)\n" + ptxas[i] + link_logs[i];
    out[i] = batch_variant(in, variants[i], std::move(so).value(), log, ptxas[i], result->wall_s);
  }
  batched_->Increment(static_cast<double>(n));
  return out;
}

CompileHandler::Build CompileHandler::batch_variant(const BuildInputs& in,
                                                    const std::map<std::string, std::string>& defines, std::string so,
                                                    const std::string& log, const std::string& ptxas, double wall_s) {
  Build b;
  b.so = std::move(so);
  std::vector<std::string> flags = in.base;
  for (auto& d : define_flags(defines)) flags.push_back(std::move(d));
  b.info.ok = true;
  b.info.compiler = "nvcc";
  b.info.flags = join(flags);
  b.info.toolchain = in.version;
  b.info.duration_s = wall_s;
  b.info.process.returncode = 0;
  b.info.process.stderr_text = trim_log(log, static_cast<size_t>(options_.max_log_bytes));
  b.info.log = b.info.process.stderr_text;
  record_usage(b.info, parse_ptxas_usage(ptxas));
  b.info.kernel_sha256 = sha256_hex(b.so);
  return b;
}

}  // namespace kiln::compiler
