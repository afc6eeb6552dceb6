#include "kiln/cuda/eval.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <memory>

#include "cuda_device.h"
#include "kiln/cuda/nvml.h"
#include "kiln/eval/device.h"
#include "kiln/eval/device_lock.h"
#include "kiln/eval/torch_module.h"
#include "kiln/proto/ids.h"

namespace kiln::cuda {
namespace {

Result<proto::TestReport> evaluate_unguarded(const task::TaskSpec& spec, const eval::Candidate& candidate,
                                             const eval::Candidate& reference, const eval::EvalOptions& options) {
  const bool no_reference = !reference.entry && reference.library.empty() && !spec.torch_reference();
  if ((!candidate.entry && candidate.library.empty()) || no_reference)
    return invalid_argument("evaluate: missing kernel entry point");
  if (spec.backend != proto::Backend::kCuda)
    return invalid_argument("this evaluator runs the cuda backend, the task is " +
                            std::string(proto::name(spec.backend)));
  for (const auto& b : spec.baselines) {
    if (!is_known_baseline(b))
      return invalid_argument("unknown baseline '" + b + "' (known: cublas_sgemm, torch_eager, torch_compile)");
  }
  KILN_RETURN_IF_ERROR(eval::check_timing_options(options));
  // Starting (CUDA contexts, device arenas, runners) and tearing down use the device too: they hold its
  // lock shared, so they never overlap a case another evaluation slot is timing (kiln/eval/device_lock.h).
  KILN_ASSIGN_OR_RETURN(eval::DeviceLock lock, eval::DeviceLock::open(options.device_lock));
  std::unique_ptr<CudaDevice> device;
  {
    KILN_ASSIGN_OR_RETURN(eval::DeviceLock::Hold held, lock.hold(eval::DeviceLock::Mode::kShared));
    KILN_ASSIGN_OR_RETURN(device, CudaDevice::start(spec, candidate, reference, options));
  }
  const double start_s = lock.held_s(eval::DeviceLock::Mode::kShared);
  const auto start_phases = device->start_phases();
  Result<proto::TestReport> report = eval::run_protocol(spec, *device, options);
  {
    auto held = lock.hold(eval::DeviceLock::Mode::kShared);  // without it (an error) the teardown goes ahead
    device.reset();
  }
  if (report.is_ok() && lock.active()) {
    // Start and teardown: the contexts, arenas and runners (how long, and how long they waited for slots
    // that were timing).
    report->metadata["eval_start_s"] = eval::metadata_seconds(start_s);
    report->metadata["eval_teardown_s"] =
        eval::metadata_seconds(lock.held_s(eval::DeviceLock::Mode::kShared) - start_s);
    report->metadata["eval_start_teardown_wait_s"] =
        eval::metadata_seconds(lock.waited_s(eval::DeviceLock::Mode::kShared));
    for (const auto& [phase, seconds] : start_phases) {
      report->metadata["eval_start_" + phase + "_s"] = eval::metadata_seconds(seconds);
    }
  }
  return report;
}

std::string format_uuid(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char buf[48];
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

bool is_known_baseline(const std::string& name) { return name == "cublas_sgemm" || eval::is_torch_baseline(name); }

proto::WorkerInfo cuda_worker_info() {
  proto::WorkerInfo w;
  w.backend = proto::Backend::kCuda;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) w.host = host;
  int device = 0, driver = 0, runtime = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    w.device_name = prop.name;
    w.gpu_uuid = format_uuid(prop.uuid);
  }
  if (cudaDriverGetVersion(&driver) == cudaSuccess) w.driver_version = "CUDA " + cuda_version_text(driver);
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) w.runtime_version = cuda_version_text(runtime);
  // NVML adds the driver's own version, the SM clock and the temperature; without it they stay unknown.
  if (auto nvml = Nvml::load(); nvml.is_ok() && !w.gpu_uuid.empty()) {
    if (auto gpu = (*nvml)->device_by_uuid(w.gpu_uuid); gpu.is_ok()) {
      if (!gpu->driver_version.empty()) w.driver_version = gpu->driver_version;
      if (auto hz = (*nvml)->read(*gpu, GpuSensor::kSmClock); hz.is_ok()) w.clock_hz = *hz;
      if (auto c = (*nvml)->read(*gpu, GpuSensor::kTemperature); c.is_ok()) w.temperature_c = *c;
    }
  }
  return w;
}

Result<proto::TestReport> evaluate(const task::TaskSpec& spec, const eval::Candidate& candidate,
                                   const eval::Candidate& reference, const eval::EvalOptions& options) {
  try {
    return evaluate_unguarded(spec, candidate, reference, options);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("evaluate: out of host memory for the task's tensors");
  } catch (const std::exception& e) {
    return internal_error(std::string("evaluate: ") + e.what());
  }
}

}  // namespace kiln::cuda
