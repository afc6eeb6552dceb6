// The device a tester measures on: the host's CPU, or one GPU, selected by index or claimed among the
// visible ones (cuda::GpuClaim), with NVML for its gauges.
#pragma once

#include <memory>

#include "kiln/core/status.h"
#include "kiln/cuda/gpu_claim.h"
#include "kiln/cuda/nvml.h"
#include "kiln/proto/payloads.h"
#include "kiln/tester/options.h"

namespace kiln::tester {

struct TesterDevice {
  proto::WorkerInfo worker;          // this host (and GPU), for reports the child could not write
  std::shared_ptr<cuda::Nvml> nvml;  // cuda only
  cuda::GpuIdentity gpu;             // cuda: the GPU served; its uuid is the child's CUDA_VISIBLE_DEVICES
  cuda::GpuClaim claim;              // cuda with gpu_claim_dir: held while the tester lives
};

// The CPU for backend cpu. For cuda, the GPU to serve; failing without one (a CUDA tester without a GPU it
// can name must not register for test.cuda).
Result<TesterDevice> open_device(const TesterOptions& options);

}  // namespace kiln::tester
