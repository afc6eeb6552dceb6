#include "tester_device.h"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kiln/eval/host.h"

namespace kiln::tester {

Result<TesterDevice> open_device(const TesterOptions& options) {
  TesterDevice device;
  if (options.backend == proto::Backend::kCpu) {
    device.worker = eval::cpu_worker_info();
    return device;
  }
  auto nvml = cuda::Nvml::load();
  if (!nvml.is_ok()) return failed_precondition("tester: backend cuda but no usable GPU: " + nvml.status().message());
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  Result<cuda::GpuIdentity> gpu = internal_error("no GPU selected");
  if (options.gpu_claim_dir.empty() || options.gpu_index >= 0) {
    gpu = cuda::select_gpu(**nvml, options.gpu_index, visible);
  } else {
    // Testers sharing the claim folder take distinct GPUs: the first visible one no other tester holds.
    auto gpus = cuda::visible_gpus(**nvml, visible);
    if (!gpus.is_ok()) return failed_precondition("tester: backend cuda but no usable GPU: " + gpus.status().message());
    std::vector<std::string> uuids;
    for (const auto& g : *gpus) uuids.push_back(g.uuid);
    auto claimed = cuda::GpuClaim::first_free(options.gpu_claim_dir, uuids);
    if (!claimed.is_ok()) return failed_precondition("tester: no GPU to serve: " + claimed.status().message());
    gpu = (*gpus)[claimed->index()];
    device.claim = std::move(claimed).value();
  }
  if (!gpu.is_ok()) return failed_precondition("tester: backend cuda but no usable GPU: " + gpu.status().message());
  device.worker.backend = proto::Backend::kCuda;
  device.worker.host = eval::host_name();
  device.worker.device_name = gpu->name;
  device.worker.gpu_uuid = gpu->uuid;
  device.worker.driver_version = gpu->driver_version;
  device.nvml = std::move(nvml).value();
  device.gpu = std::move(gpu).value();
  return device;
}

}  // namespace kiln::tester
