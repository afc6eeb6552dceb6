// One contestant of the CUDA device (cuda_device.h): its runner, the device arenas the evaluator shares
// with that runner alone, and where its tensors sit in them (placement and layout). Internal to libs/cuda.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/cuda/runtime.h"
#include "kiln/eval/runner.h"
#include "kiln/eval/device.h"
#include "kiln/kernel_abi.h"

namespace kiln::cuda::detail {

// Tensors start on this alignment in a contestant's device arena; between blocks of timing rounds they
// move by a multiple of it, up to kPlacementSlack (other pages and memory channels for every contestant).
constexpr size_t kTensorAlignment = 4096;
constexpr size_t kPlacementSlack = 64 * kTensorAlignment;

constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The descriptor of a tensor shaped like `shape_of` whose data the runner finds at `staged_data`.
kiln_tensor descriptor(const eval::HostTensor& shape_of, void* staged_data);

// Where a contestant's tensors sit in the current block: which device arena, and how far into it.
struct Placement {
  size_t offset = 0;
  size_t arena = 0;
};

// Where the tensors of one case sit: which of a contestant's device arenas, and where in it.
struct Layout {
  size_t arena = 0;
  std::vector<size_t> in, out;               // offsets in the arena
  std::vector<kiln_tensor> inputs, outputs;  // descriptors as the runner gets them (arena and offset)

  Layout() = default;
  Layout(const eval::TensorSet& shapes, Placement p);
};

// One contestant: its runner, the device arenas the evaluator owns and shares with that runner alone,
// where its tensors are now, and its raw timed calls.
struct Contestant {
  std::string name;
  std::unique_ptr<eval::Runner> runner;
  std::vector<DeviceBuffer> arenas;
  Placement placement;
  Layout layout;
  std::vector<double> wall_us, reported_us;

  char* at(size_t offset) const { return static_cast<char*>(arenas[layout.arena].data()) + offset; }

  Status upload(const eval::TensorSet& host);
  Status download(eval::TensorSet& host, bool inputs_too) const;
};

}  // namespace kiln::cuda::detail
