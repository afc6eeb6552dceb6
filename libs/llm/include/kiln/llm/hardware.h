// What a prompt says about the machine a kernel runs on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/proto/ids.h"

namespace kiln::llm {

struct GpuSpec {
  std::string name;  // "NVIDIA H200"
  std::string arch;  // "sm_90"
  int64_t sm_count = 0;
  double memory_bandwidth_gbs = 0;  // GB/s, vendor figure
  int64_t registers_per_sm = 0;     // 32-bit registers
  int64_t shared_bytes_per_sm = 0;  // configurable shared memory per SM, bytes
  int64_t memory_gib = 0;
};

// Vendor figures for common data-centre and desktop GPUs, matched by name ignoring case and anything
// outside [a-z0-9] ("NVIDIA H200", "h200", "NVIDIA-H200-141GB" all match H200); nullopt if unknown.
std::optional<GpuSpec> gpu_spec(std::string_view name);

struct CpuSpec {
  std::string model;  // /proc/cpuinfo "model name"
  int64_t cores = 0;  // logical CPUs online
};

// The CPU this process runs on (the bridge's host: with `kiln up` also the tester's).
CpuSpec local_cpu();

// A few lines for the prompt: for CUDA the GPU's figures (or its name alone when unknown), for the
// CPU backend the model and cores.
std::string hardware_summary(proto::Backend backend, std::string_view gpu_name);

}  // namespace kiln::llm
