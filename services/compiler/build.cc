// One build: its inputs and cache key, the content-addressed cache, and the build itself (alone, or as one
// variant of a batch, batching.cc).
#include <utility>

#include "build_steps.h"
#include "kiln/compiler/batch.h"
#include "kiln/compiler/handler.h"
#include "kiln/compiler/lean_headers.h"
#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/core/strings.h"
#include "spdlog/spdlog.h"

namespace kiln::compiler {

using namespace detail;

std::string CompileHandler::BuildInputs::content_key(std::string_view flags_part) const {
  Sha256 h;
  for (std::string_view part :
       {kCacheVersion, proto::name(backend), std::string_view(compiler), flags_part, std::string_view(version),
        kernel_abi_header(), std::string_view(source_name), std::string_view(files_hash)}) {
    h.update_field(part);
  }
  return h.hex_digest();
}

Result<CompileHandler::BuildInputs> CompileHandler::build_inputs(proto::Backend backend, const std::string& arch,
                                                                 const proto::FileMap& files,
                                                                 const std::string& source_name,
                                                                 const std::string& source,
                                                                 const std::map<std::string, std::string>& defines) {
  BuildInputs in;
  in.backend = backend;
  KILN_ASSIGN_OR_RETURN(in.version, toolchain(backend));
  in.compiler = backend == proto::Backend::kCuda ? options_.nvcc : options_.cxx;
  // Everything that can change the binary: the package's sources and headers (not its task.yaml or notes),
  // the source being built, the ABI header, the flags and the exact toolchain.
  in.sources = files;
  in.sources.erase("task.yaml");
  in.sources.erase("instructions.md");
  in.sources[source_name] = proto::Bytes{source};
  in.source_name = source_name;
  in.source = source;
  in.defines = defines;
  std::map<std::string, std::string> plain;
  for (const auto& [name, content] : in.sources) plain[name] = content.data;

  in.base = base_flags(backend, arch);
  if (options_.lean_headers && backend == proto::Backend::kCuda) {
    for (auto& f : lean_header_flags(lean_headers(plain, defines))) in.base.push_back(std::move(f));
  }
  std::vector<std::string> flags = in.base;
  for (auto& d : define_flags(defines)) flags.push_back(std::move(d));
  in.flags_text = join(flags);
  in.files_hash = hash_files(plain);
  in.key = in.content_key(in.flags_text);
  return in;
}

Result<CompileHandler::Build> CompileHandler::build(proto::Backend backend, const std::string& arch,
                                                    const proto::FileMap& files, const std::string& source_name,
                                                    const std::string& source,
                                                    const std::map<std::string, std::string>& defines, bool may_batch) {
  KILN_ASSIGN_OR_RETURN(BuildInputs in, build_inputs(backend, arch, files, source_name, source, defines));
  if (auto hit = cached(in.key)) return std::move(*hit);

  // A batch-built variant is kept under a key of its own: a build that must be alone (a confirmation's)
  // never finds it. A batch groups the builds whose key differs only in the defines.
  std::vector<std::string> params;
  for (const auto& [name, value] : defines) params.push_back(name);
  if (may_batch && backend == proto::Backend::kCuda && options_.batch_max > 1 && batchable(source, params).is_ok()) {
    const std::string batch_key = sha256_hex(in.key + "/batched");
    if (auto hit = cached(batch_key)) return std::move(*hit);
    if (auto batched = build_in_batch(in.content_key(join(in.base)), in)) {
      keep(batch_key, *batched);
      return std::move(*batched);
    }
  }

  TempDir scratch("kiln-compile");
  KILN_RETURN_IF_ERROR(write_sources(scratch.path(), in.sources));
  KILN_ASSIGN_OR_RETURN(sandbox::SandboxResult result,
                        run_compiler(backend, scratch.path(), source_name, in.base, defines, in.key));
  KILN_ASSIGN_OR_RETURN(Build out, read_build(in, result, scratch.path()));
  if (out.info.ok) keep(in.key, out);
  return out;
}

Result<CompileHandler::Build> CompileHandler::read_build(const BuildInputs& in, const sandbox::SandboxResult& result,
                                                         const std::string& dir) {
  Build out;
  std::string out_text = result.stdout_text;
  std::string err_text = result.stderr_text;
  replace_all(out_text, dir + "/", "");
  replace_all(err_text, dir + "/", "");
  std::string log = out_text + err_text;
  const size_t max_log = static_cast<size_t>(options_.max_log_bytes);
  const auto [out_budget, err_budget] = proto::stream_budgets(out_text.size(), err_text.size(), max_log);
  out.info.process.returncode = result.returncode();
  out.info.process.stdout_text = trim_log(out_text, out_budget);
  out.info.process.stderr_text = trim_log(err_text, err_budget);
  if (!result.succeeded()) out.info.process.message = result.describe(options_.timeout_s);
  out.info.compiler = in.backend == proto::Backend::kCuda ? "nvcc" : "g++";
  out.info.flags = in.flags_text;
  out.info.toolchain = in.version;
  out.info.duration_s = result.wall_s;
  out.timed_out = result.timed_out;
  if (result.timed_out) log = "compile timed out after " + sandbox::format_seconds(options_.timeout_s) + "\n" + log;
  out.info.log = trim_log(log, max_log);
  if (in.backend == proto::Backend::kCuda) record_usage(out.info, parse_ptxas_usage(log));
  if (crashed(result)) {
    return unavailable(in.compiler + " " + result.describe(options_.timeout_s) + " building " + in.source_name + ":\n" +
                       trim_log(log, kMaxRetryLogBytes));
  }
  if (!result.succeeded()) return out;
  auto so = read_file(dir + "/" + std::string(kOutputName));
  if (!so.is_ok()) {
    return unavailable(in.compiler + " exited 0 but wrote no shared object for " + in.source_name + ": " +
                       so.status().message());
  }
  out.so = std::move(so).value();
  out.info.ok = true;
  out.info.kernel_sha256 = sha256_hex(out.so);
  return out;
}

// ------------------------------------------------------------------------------------------ the cache

std::string CompileHandler::cache_path(const std::string& key) const {
  return options_.cache_dir + "/" + key.substr(0, 2) + "/" + key;
}

std::optional<CompileHandler::Build> CompileHandler::cached(const std::string& key) {
  auto so = read_file(cache_path(key) + ".so");
  if (!so.is_ok()) return std::nullopt;
  auto info_bytes = read_file(cache_path(key) + ".build");
  if (!info_bytes.is_ok()) return std::nullopt;
  auto info = proto::decode<proto::BuildInfo>(*info_bytes);
  if (!info.is_ok() || !info->ok) return std::nullopt;
  Build hit;
  hit.info = std::move(info).value();
  hit.info.cache_hit = true;
  hit.so = std::move(so).value();
  cache_hits_->Increment();
  return hit;
}

void CompileHandler::keep(const std::string& key, const Build& build) {
  Status st = make_dirs(options_.cache_dir + "/" + key.substr(0, 2));
  if (st.is_ok()) st = write_file_atomic(cache_path(key) + ".so", build.so);
  if (st.is_ok()) st = write_file_atomic(cache_path(key) + ".build", proto::encode(build.info));
  if (!st.is_ok()) spdlog::warn("compile cache: {}", st.message());
}

}  // namespace kiln::compiler
