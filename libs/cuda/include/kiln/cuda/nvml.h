// NVML, loaded at run time with dlopen("libnvidia-ml.so.1") (DESIGN §8): which GPUs a host has, their
// identity, and the sensors the tester exports. No CUDA header is needed: a build without the CUDA
// toolkit still has this, and a host without a driver gets an error value, never a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::cuda {

struct GpuIdentity {
  int index = -1;              // NVML's (physical) index
  std::string name;            // "NVIDIA H200"
  std::string uuid;            // "GPU-8f6c..."
  std::string driver_version;  // "580.159.04"
  int cc_major = 0, cc_minor = 0;
  void* handle = nullptr;  // nvmlDevice_t, valid while the Nvml that made it lives

  std::string arch() const { return "sm_" + std::to_string(cc_major) + std::to_string(cc_minor); }
};

enum class GpuSensor { kUtilization, kMemoryUsed, kPower, kTemperature, kSmClock };
// "utilization", "memory_used", ...: for log lines.
const char* sensor_name(GpuSensor sensor);

class Nvml {
 public:
  // Loads and initializes NVML; unavailable when the library or the driver is not there.
  static Result<std::shared_ptr<Nvml>> load();
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  Result<int> device_count() const;
  Result<GpuIdentity> device_by_index(int index) const;
  Result<GpuIdentity> device_by_uuid(const std::string& uuid) const;
  // In base units: ratio 0..1, bytes, watts, degrees Celsius, hertz.
  Result<double> read(const GpuIdentity& gpu, GpuSensor sensor) const;

  struct Api;  // the resolved entry points (private to nvml.cc)

 private:
  Nvml(void* library, std::unique_ptr<Api> api);
  void* library_;
  std::unique_ptr<Api> api_;
};

// The GPU a tester serves: `config_index` when >= 0, else the first entry of CUDA_VISIBLE_DEVICES (an index
// or a "GPU-" uuid) when `visible_devices` is set and non-empty, else 0.
Result<GpuIdentity> select_gpu(const Nvml& nvml, int64_t config_index, const char* visible_devices);

// The GPUs this process may use: the entries of `visible_devices` (CUDA_VISIBLE_DEVICES: indices or "GPU-"
// uuids) when set and non-empty, else every GPU NVML sees. Testers claim one of these (gpu_claim.h).
Result<std::vector<GpuIdentity>> visible_gpus(const Nvml& nvml, const char* visible_devices);

}  // namespace kiln::cuda
