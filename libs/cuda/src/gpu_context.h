// The evaluator's own context on the device (cuda_device.h): its stream, the buffer that flushes the L2
// between cold calls, and the probe issued after every call. Internal to libs/cuda.
#pragma once

#include <memory>

#include "kiln/core/status.h"
#include "kiln/cuda/runtime.h"

namespace kiln::cuda::detail {

// The evaluator's own context on the device: its stream, the L2 flush buffer and the probe.
struct Gpu {
  Stream stream;
  DeviceBuffer flush;
  DeviceBuffer probe;
  int flush_round = 0;

  Status flush_l2();
  // Work of this context issued right after a runner answered: it has to get the device, so a kernel
  // the runner left running (its own synchronize skipped) either delays it or shares the device with it.
  Status probe_device();
};

// The context's stream and probe, and (`cold`) a flush buffer of kFlushL2Multiple times the L2.
Result<std::unique_ptr<Gpu>> open_gpu(bool cold);

}  // namespace kiln::cuda::detail
