#include "kiln/eval/eval.h"

#include <dlfcn.h>

#include <cstdio>
#include <exception>
#include <string>
#include <utility>

#include "baselines.h"
#include "cpu_device.h"
#include "kiln/eval/device.h"
#include "kiln/eval/torch_module.h"
#include "kiln/proto/ids.h"

namespace kiln::eval {
namespace {

Result<proto::TestReport> evaluate_unguarded(const task::TaskSpec& spec, const Candidate& candidate,
                                             KernelEntry reference, const EvalOptions& options) {
  if ((!candidate.entry && candidate.library.empty()) || (!reference && !spec.torch_reference()))
    return invalid_argument("evaluate: missing kernel entry point");
  if (spec.backend != proto::Backend::kCpu)
    return invalid_argument("this evaluator runs the cpu backend, the task is " +
                            std::string(proto::name(spec.backend)));
  if (options.profile_run) return invalid_argument("profiling runs are for the cuda backend");
  for (const auto& b : spec.baselines) {
    if (!detail::find_baseline(b) && !is_torch_baseline(b)) {
      return invalid_argument("unknown baseline '" + b + "' (known: " + detail::known_baselines() + ", " +
                              kTorchEager + ", " + kTorchCompile + ")");
    }
  }
  KILN_RETURN_IF_ERROR(check_timing_options(options));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<CpuDevice> device, CpuDevice::start(spec, candidate, reference, options));
  return run_protocol(spec, *device, options);
}

}  // namespace

std::string metadata_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

Result<KernelLibrary> KernelLibrary::open(const std::string& path) {
  // dlopen searches the library path for a bare name; a kernel is always a file we were given.
  const std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();
  // RTLD_NODELETE: a kernel may leave OpenMP worker threads behind that must not outlive its code.
  void* handle = dlopen(file.c_str(), RTLD_LOCAL | RTLD_NOW | RTLD_NODELETE);
  if (!handle) {
    const char* err = dlerror();
    return invalid_argument("dlopen " + path + ": " + (err ? err : "unknown error"));
  }
  void* sym = dlsym(handle, "kiln_entry");
  if (!sym) {
    dlclose(handle);
    return invalid_argument(path + ": no kiln_entry symbol (is it declared extern \"C\"?)");
  }
  return KernelLibrary(handle, reinterpret_cast<KernelEntry>(sym));
}

KernelLibrary::~KernelLibrary() {
  if (handle_) dlclose(handle_);
}

KernelLibrary::KernelLibrary(KernelLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), entry_(std::exchange(other.entry_, nullptr)) {}

KernelLibrary& KernelLibrary::operator=(KernelLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    entry_ = std::exchange(other.entry_, nullptr);
  }
  return *this;
}

bool is_known_baseline(const std::string& name) {
  return detail::find_baseline(name) != nullptr || is_torch_baseline(name);
}

Result<proto::TestReport> evaluate(const task::TaskSpec& spec, KernelEntry candidate, KernelEntry reference,
                                   const EvalOptions& options) {
  return evaluate(spec, Candidate{"", candidate}, reference, options);
}

Result<proto::TestReport> evaluate(const task::TaskSpec& spec, const Candidate& candidate, KernelEntry reference,
                                   const EvalOptions& options) {
  try {
    return evaluate_unguarded(spec, candidate, reference, options);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("evaluate: out of memory allocating the task's tensors");
  } catch (const std::exception& e) {
    return internal_error(std::string("evaluate: ") + e.what());
  }
}

}  // namespace kiln::eval
