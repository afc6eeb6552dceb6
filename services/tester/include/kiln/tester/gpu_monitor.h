// Per-GPU NVML gauges on the tester's /metrics (DESIGN §8): kiln_gpu_utilization_ratio,
// kiln_gpu_memory_used_bytes, kiln_gpu_power_watts, kiln_gpu_temperature_celsius and
// kiln_gpu_sm_clock_hertz, labelled {gpu, gpu_uuid}, refreshed by a background thread. A sensor that keeps
// failing is polled less and less often (a gap in a graph, never an error); a series appears only once its
// sensor has answered, so a host without NVML exports none.
#pragma once

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "kiln/cuda/nvml.h"

namespace kiln::tester {

class GpuMonitor {
 public:
  static constexpr std::chrono::milliseconds kPollInterval{1000};
  // After each failure in a row a sensor waits twice as long, up to this.
  static constexpr std::chrono::milliseconds kMaxBackoff{60000};

  GpuMonitor(std::shared_ptr<cuda::Nvml> nvml, cuda::GpuIdentity gpu, std::shared_ptr<prometheus::Registry> registry);
  ~GpuMonitor();  // stops and joins the thread
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // One pass over the sensors that are due (the thread calls this; tests call it directly).
  void poll_once();

 private:
  struct Sensor {
    cuda::GpuSensor kind;
    prometheus::Family<prometheus::Gauge>* family = nullptr;
    prometheus::Gauge* gauge = nullptr;  // created on the first reading
    int failures = 0;
    std::chrono::steady_clock::time_point next_poll{};
  };
  void run();

  std::shared_ptr<cuda::Nvml> nvml_;
  cuda::GpuIdentity gpu_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::mutex poll_mu_;  // guards sensors_: the thread and a test may poll at once
  std::array<Sensor, 5> sensors_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kiln::tester
