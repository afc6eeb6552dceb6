// Behaviour descriptors of a program for MAP-Elites (DESIGN §6): optimization levels read from the
// source by static analysis, and hardware figures from its build, each bucketed into a small range.
//
// Static levels (0-3). Comments, string and character literals are stripped first, so a kernel cannot
// climb a level by mentioning a technique. Each dimension has pattern groups; the level is the number
// of distinct groups the code uses, capped at 3:
//   memory:      shared memory (__shared__, extern shared buffers, local tiles: tile/TILE identifiers)
//                | vector loads (float2/float4/int4/half2/__ldg/_mm*_load*/_mm*_loadu*)
//                | restrict (__restrict__, __restrict, restrict) | prefetch / async copies
//                (__builtin_prefetch, _mm_prefetch, cp.async, memcpy_async, __pipeline)
//                | alignment (alignas, __align__, __builtin_assume_aligned)
//   compute:     unrolling (#pragma unroll, #pragma GCC unroll, UNROLL) | fused multiply-add (fma, fmaf,
//                __fmaf_rn, _mm*_fmadd*) | intrinsics (__expf, __fdividef, rsqrtf, __frcp, _mm*_*,
//                __builtin_*) | tensor cores (wmma, mma_sync, mma., wgmma, __hmma) | SIMD pragmas
//                (#pragma omp simd, #pragma GCC ivdep)
//   parallelism: thread indexing (threadIdx, blockIdx, blockDim, num_threads, THREADS)
//                | OpenMP / host threads (#pragma omp parallel, std::thread, std::async)
//                | grid-stride loops (gridDim.x * blockDim.x or blockDim.x * gridDim.x)
//                | warp-level work (__shfl*, warpSize, __syncwarp, __ballot_sync, cooperative_groups)
//                | launch bounds (__launch_bounds__)
// Hardware levels (CUDA builds; -1 "unknown" from g++ lands in bucket 0):
//   registers per thread: 0 unknown or <= 32, 1 <= 64, 2 <= 128, 3 above
//   shared bytes:         0 none or unknown, 1 <= 16 KiB, 2 <= 48 KiB, 3 above
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::archive {

namespace dim {
inline constexpr std::string_view kMemory = "memory";
inline constexpr std::string_view kCompute = "compute";
inline constexpr std::string_view kParallelism = "parallelism";
inline constexpr std::string_view kRegisters = "registers";
inline constexpr std::string_view kSharedMemory = "shared_memory";
}  // namespace dim

inline constexpr int64_t kLevels = 4;  // every dimension is bucketed into 0..3

// The default dimensions, in cell-key order.
std::vector<std::string> default_dimensions();
// True for the names above.
bool known_dimension(std::string_view name);

// Source with // and /* */ comments, string and character literals replaced by spaces (newlines kept).
std::string strip_comments_and_strings(std::string_view source);

// The static levels of a source: {"memory": m, "compute": c, "parallelism": p}.
std::map<std::string, int64_t> static_levels(std::string_view source);

int64_t register_bucket(int64_t registers_per_thread);
int64_t shared_bytes_bucket(int64_t shared_bytes);

// Coordinates on `dimensions` (unknown names get 0). registers / shared_bytes: -1 when unknown.
std::vector<int64_t> coordinates(const std::vector<std::string>& dimensions, std::string_view source, int64_t registers,
                                 int64_t shared_bytes);

// "memory=2,compute=1,parallelism=3"
std::string cell_key(const std::vector<std::string>& dimensions, const std::vector<int64_t>& coords);

// Program.complexity: the lines of a source that hold code once comments are stripped (blank and
// comment-only lines do not count). A size measure, as KernelFoundry's complexity, that a comment cannot
// inflate.
int64_t code_lines(std::string_view source);

// Program.diversity: how far a program's coordinates lie from those of `others` (the programs it is
// compared with): the mean L1 distance, over `others`, divided by the largest distance the grid allows
// (dimensions x (kLevels - 1)). 0 when there is nothing to compare with or all share its cell, 1 when
// every other program sits in the opposite corner.
double behaviour_diversity(const std::vector<int64_t>& coords, const std::vector<std::vector<int64_t>>& others);

}  // namespace kiln::archive
