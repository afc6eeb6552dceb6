// CUDA runtime helpers (only libs/cuda and the tester see CUDA headers, DESIGN §10): a check macro that
// records the call's text, the error's name and file:line (after nvbench's cuda_call.cuh), and move-only
// owners of streams, events and device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "kiln/core/status.h"

namespace kiln::cuda {

// "cudaMalloc(&p, n): cudaErrorMemoryAllocation (out of memory) at buffer.cc:42"
std::string describe_error(cudaError_t error, const char* call_text, const char* file, int line);

// Whether the error leaves the context unusable (an illegal address, a trap, a launch failure): every
// later CUDA call of the process fails with it, so the evaluation must end.
bool is_sticky(cudaError_t error);

Status error_status(cudaError_t error, const char* call_text, const char* file, int line);

}  // namespace kiln::cuda

// Returns a Status naming the call, the error and file:line from the enclosing function when `call` fails.
#define KILN_CUDA_RETURN_IF_ERROR(call)                                               \
  do {                                                                                \
    const cudaError_t kiln_cuda_error_ = (call);                                      \
    if (kiln_cuda_error_ != cudaSuccess) {                                            \
      return ::kiln::cuda::error_status(kiln_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)

namespace kiln::cuda {

// A non-blocking stream: it does not wait on the legacy default stream.
class Stream {
 public:
  static Result<Stream> create();
  Stream() = default;
  ~Stream();
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  explicit Stream(cudaStream_t s) : stream_(s) {}
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  static Result<Event> create();
  Event() = default;
  ~Event();
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  explicit Event(cudaEvent_t e) : event_(e) {}
  cudaEvent_t event_ = nullptr;
};

// Device memory from cudaMalloc (never managed memory: see the device notes on hangs).
class DeviceBuffer {
 public:
  static Result<DeviceBuffer> allocate(size_t bytes);
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  DeviceBuffer(void* p, size_t bytes) : data_(p), bytes_(bytes) {}
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kiln::cuda
