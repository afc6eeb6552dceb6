#include "kiln/tester/gpu_monitor.h"

#include <algorithm>
#include <string>
#include <utility>

#include "spdlog/spdlog.h"

namespace kiln::tester {
namespace {

struct SensorMetric {
  cuda::GpuSensor kind;
  const char* name;
  const char* help;
};

constexpr SensorMetric kSensorMetrics[] = {
    {cuda::GpuSensor::kUtilization, "kiln_gpu_utilization_ratio",
     "Fraction of the last sample period in which a kernel ran on the GPU (NVML)"},
    {cuda::GpuSensor::kMemoryUsed, "kiln_gpu_memory_used_bytes", "GPU memory in use (NVML)"},
    {cuda::GpuSensor::kPower, "kiln_gpu_power_watts", "GPU power draw (NVML)"},
    {cuda::GpuSensor::kTemperature, "kiln_gpu_temperature_celsius", "GPU core temperature (NVML)"},
    {cuda::GpuSensor::kSmClock, "kiln_gpu_sm_clock_hertz", "Current SM clock (NVML)"},
};

}  // namespace

GpuMonitor::GpuMonitor(std::shared_ptr<cuda::Nvml> nvml, cuda::GpuIdentity gpu,
                       std::shared_ptr<prometheus::Registry> registry)
    : nvml_(std::move(nvml)), gpu_(std::move(gpu)), registry_(std::move(registry)) {
  for (size_t i = 0; i < sensors_.size(); ++i) {
    sensors_[i].kind = kSensorMetrics[i].kind;
    sensors_[i].family =
        &prometheus::BuildGauge().Name(kSensorMetrics[i].name).Help(kSensorMetrics[i].help).Register(*registry_);
  }
  thread_ = std::thread([this] { run(); });
}

GpuMonitor::~GpuMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void GpuMonitor::poll_once() {
  std::lock_guard<std::mutex> lock(poll_mu_);
  const auto now = std::chrono::steady_clock::now();
  for (Sensor& s : sensors_) {
    if (now < s.next_poll) continue;
    auto value = nvml_->read(gpu_, s.kind);
    if (!value.is_ok()) {
      // Back off: 2 s, 4 s, ... up to kMaxBackoff; say so once, when the sensor first fails.
      if (s.failures++ == 0) {
        spdlog::warn("gpu {}: sensor {} failed ({}); polling it less often", gpu_.index, cuda::sensor_name(s.kind),
                     value.status().message());
      }
      const auto backoff =
          std::min<std::chrono::milliseconds>(kPollInterval * (1 << std::min(s.failures, 6)), kMaxBackoff);
      s.next_poll = now + backoff;
      continue;
    }
    s.failures = 0;
    s.next_poll = now + kPollInterval;
    if (!s.gauge) s.gauge = &s.family->Add({{"gpu", std::to_string(gpu_.index)}, {"gpu_uuid", gpu_.uuid}});
    s.gauge->Set(*value);
  }
}

void GpuMonitor::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    poll_once();
    lock.lock();
    wake_.wait_for(lock, kPollInterval, [this] { return stop_; });
  }
}

}  // namespace kiln::tester
