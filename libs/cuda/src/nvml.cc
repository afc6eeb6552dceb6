#include "kiln/cuda/nvml.h"

#include <dlfcn.h>

#include <cstdlib>
#include <utility>

namespace kiln::cuda {
namespace {

// The few NVML types and constants used here, from nvml.h (stable ABI since NVML 5).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlTemperatureGpu = 0;
constexpr int kNvmlClockSm = 1;
constexpr unsigned kNameBytes = 96;     // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kUuidBytes = 96;     // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned kVersionBytes = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*device_count)(unsigned*) = nullptr;
  nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*index)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*compute_capability)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;

  Status check(nvmlReturn_t rc, const char* what) const {
    if (rc == kNvmlSuccess) return Status::ok();
    const char* text = error_string ? error_string(rc) : nullptr;
    return unavailable(std::string("nvml: ") + what + ": " + (text ? text : "error " + std::to_string(rc)));
  }
};

namespace {

template <class F>
bool resolve(void* lib, F& fn, const char* symbol) {
  fn = reinterpret_cast<F>(dlsym(lib, symbol));
  return fn != nullptr;
}

}  // namespace

const char* sensor_name(GpuSensor sensor) {
  switch (sensor) {
    case GpuSensor::kUtilization: return "utilization";
    case GpuSensor::kMemoryUsed: return "memory_used";
    case GpuSensor::kPower: return "power";
    case GpuSensor::kTemperature: return "temperature";
    case GpuSensor::kSmClock: return "sm_clock";
  }
  return "unknown";
}

Nvml::Nvml(void* library, std::unique_ptr<Api> api) : library_(library), api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
  dlclose(library_);
}

Result<std::shared_ptr<Nvml>> Nvml::load() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    return unavailable(std::string("nvml: cannot load libnvidia-ml.so.1: ") + (err ? err : "not found"));
  }
  auto api = std::make_unique<Api>();
  bool ok =
      resolve(lib, api->init, "nvmlInit_v2") && resolve(lib, api->shutdown, "nvmlShutdown") &&
      resolve(lib, api->error_string, "nvmlErrorString") && resolve(lib, api->device_count, "nvmlDeviceGetCount_v2") &&
      resolve(lib, api->by_index, "nvmlDeviceGetHandleByIndex_v2") &&
      resolve(lib, api->by_uuid, "nvmlDeviceGetHandleByUUID") && resolve(lib, api->name, "nvmlDeviceGetName") &&
      resolve(lib, api->uuid, "nvmlDeviceGetUUID") && resolve(lib, api->index, "nvmlDeviceGetIndex") &&
      resolve(lib, api->driver_version, "nvmlSystemGetDriverVersion") &&
      resolve(lib, api->compute_capability, "nvmlDeviceGetCudaComputeCapability") &&
      resolve(lib, api->utilization, "nvmlDeviceGetUtilizationRates") &&
      resolve(lib, api->memory, "nvmlDeviceGetMemoryInfo") && resolve(lib, api->power, "nvmlDeviceGetPowerUsage") &&
      resolve(lib, api->temperature, "nvmlDeviceGetTemperature") && resolve(lib, api->clock, "nvmlDeviceGetClockInfo");
  if (!ok) {
    dlclose(lib);
    return unavailable("nvml: libnvidia-ml.so.1 lacks an entry point Kiln needs (driver too old?)");
  }
  if (Status s = api->check(api->init(), "nvmlInit"); !s.is_ok()) {
    dlclose(lib);
    return s;
  }
  return std::shared_ptr<Nvml>(new Nvml(lib, std::move(api)));
}

Result<int> Nvml::device_count() const {
  unsigned n = 0;
  KILN_RETURN_IF_ERROR(api_->check(api_->device_count(&n), "nvmlDeviceGetCount"));
  return static_cast<int>(n);
}

namespace {

Result<GpuIdentity> identify(const Nvml::Api& api, nvmlDevice_t device) {
  GpuIdentity id;
  id.handle = device;
  char name[kNameBytes] = {}, uuid[kUuidBytes] = {}, version[kVersionBytes] = {};
  unsigned index = 0;
  KILN_RETURN_IF_ERROR(api.check(api.name(device, name, sizeof name), "nvmlDeviceGetName"));
  KILN_RETURN_IF_ERROR(api.check(api.uuid(device, uuid, sizeof uuid), "nvmlDeviceGetUUID"));
  KILN_RETURN_IF_ERROR(api.check(api.index(device, &index), "nvmlDeviceGetIndex"));
  KILN_RETURN_IF_ERROR(
      api.check(api.compute_capability(device, &id.cc_major, &id.cc_minor), "nvmlDeviceGetCudaComputeCapability"));
  if (api.driver_version(version, sizeof version) == kNvmlSuccess) id.driver_version = version;
  id.name = name;
  id.uuid = uuid;
  id.index = static_cast<int>(index);
  return id;
}

}  // namespace

Result<GpuIdentity> Nvml::device_by_index(int index) const {
  nvmlDevice_t device = nullptr;
  if (index < 0) return invalid_argument("nvml: negative GPU index " + std::to_string(index));
  KILN_RETURN_IF_ERROR(
      api_->check(api_->by_index(static_cast<unsigned>(index), &device), ("GPU " + std::to_string(index)).c_str()));
  return identify(*api_, device);
}

Result<GpuIdentity> Nvml::device_by_uuid(const std::string& uuid) const {
  nvmlDevice_t device = nullptr;
  KILN_RETURN_IF_ERROR(api_->check(api_->by_uuid(uuid.c_str(), &device), ("GPU " + uuid).c_str()));
  return identify(*api_, device);
}

Result<double> Nvml::read(const GpuIdentity& gpu, GpuSensor sensor) const {
  nvmlDevice_t d = gpu.handle;
  switch (sensor) {
    case GpuSensor::kUtilization: {
      nvmlUtilization_t u{};
      KILN_RETURN_IF_ERROR(api_->check(api_->utilization(d, &u), "nvmlDeviceGetUtilizationRates"));
      return u.gpu / 100.0;
    }
    case GpuSensor::kMemoryUsed: {
      nvmlMemory_t m{};
      KILN_RETURN_IF_ERROR(api_->check(api_->memory(d, &m), "nvmlDeviceGetMemoryInfo"));
      return static_cast<double>(m.used);
    }
    case GpuSensor::kPower: {
      unsigned milliwatts = 0;
      KILN_RETURN_IF_ERROR(api_->check(api_->power(d, &milliwatts), "nvmlDeviceGetPowerUsage"));
      return milliwatts / 1000.0;
    }
    case GpuSensor::kTemperature: {
      unsigned celsius = 0;
      KILN_RETURN_IF_ERROR(
          api_->check(api_->temperature(d, kNvmlTemperatureGpu, &celsius), "nvmlDeviceGetTemperature"));
      return static_cast<double>(celsius);
    }
    case GpuSensor::kSmClock: {
      unsigned mhz = 0;
      KILN_RETURN_IF_ERROR(api_->check(api_->clock(d, kNvmlClockSm, &mhz), "nvmlDeviceGetClockInfo"));
      return mhz * 1e6;
    }
  }
  return invalid_argument("nvml: unknown sensor");
}

namespace {

// One CUDA_VISIBLE_DEVICES entry: an index or a "GPU-" uuid.
Result<GpuIdentity> device_for_entry(const Nvml& nvml, const std::string& entry) {
  if (entry.rfind("GPU-", 0) == 0) return nvml.device_by_uuid(entry);
  char* end = nullptr;
  long index = std::strtol(entry.c_str(), &end, 10);
  if (entry.empty() || *end != '\0' || index < 0) {
    return invalid_argument("CUDA_VISIBLE_DEVICES: cannot read '" + entry + "' as a GPU index or uuid");
  }
  return nvml.device_by_index(static_cast<int>(index));
}

}  // namespace

Result<GpuIdentity> select_gpu(const Nvml& nvml, int64_t config_index, const char* visible_devices) {
  if (config_index >= 0) return nvml.device_by_index(static_cast<int>(config_index));
  std::string first;
  if (visible_devices) {
    first = visible_devices;
    first = first.substr(0, first.find(','));
  }
  if (first.empty()) return nvml.device_by_index(0);
  return device_for_entry(nvml, first);
}

Result<std::vector<GpuIdentity>> visible_gpus(const Nvml& nvml, const char* visible_devices) {
  std::vector<GpuIdentity> gpus;
  std::string list = visible_devices ? visible_devices : "";
  if (list.empty()) {
    KILN_ASSIGN_OR_RETURN(int count, nvml.device_count());
    for (int i = 0; i < count; ++i) {
      KILN_ASSIGN_OR_RETURN(auto gpu, nvml.device_by_index(i));
      gpus.push_back(std::move(gpu));
    }
    return gpus;
  }
  for (size_t start = 0; start <= list.size();) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    KILN_ASSIGN_OR_RETURN(auto gpu, device_for_entry(nvml, list.substr(start, comma - start)));
    gpus.push_back(std::move(gpu));
    start = comma + 1;
  }
  return gpus;
}

}  // namespace kiln::cuda
