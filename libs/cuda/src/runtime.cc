#include "kiln/cuda/runtime.h"

#include <cstring>

namespace kiln::cuda {

std::string describe_error(cudaError_t error, const char* call_text, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return std::string(call_text) + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ") at " +
         (base ? base + 1 : file) + ":" + std::to_string(line);
}

bool is_sticky(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorUnknown: return true;
    default: return false;
  }
}

Status error_status(cudaError_t error, const char* call_text, const char* file, int line) {
  std::string message = describe_error(error, call_text, file, line);
  if (error == cudaErrorMemoryAllocation) return resource_exhausted(std::move(message));
  return internal_error(std::move(message));
}

Result<Stream> Stream::create() {
  cudaStream_t s = nullptr;
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

Result<Event> Event::create() {
  cudaEvent_t e = nullptr;
  KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  return Event(e);
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_) cudaEventDestroy(event_);
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  void* p = nullptr;
  // A zero-sized tensor still gets a valid, distinct pointer.
  KILN_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes == 0 ? 256 : bytes));
  return DeviceBuffer(p, bytes);
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

}  // namespace kiln::cuda
