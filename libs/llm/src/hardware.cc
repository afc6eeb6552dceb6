#include "kiln/llm/hardware.h"

#include <cctype>
#include <fstream>
#include <thread>
#include <vector>

namespace kiln::llm {

namespace {

std::string slug(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return out;
}

// From the vendors' data sheets and the CUDA programming guide's compute-capability tables.
const std::vector<std::pair<std::string, GpuSpec>>& gpu_table() {
  constexpr int64_t kKiB = 1024;
  static const std::vector<std::pair<std::string, GpuSpec>> kTable{
      // Longest keys first, so "h100sxm" is tried before "h100" and "a100 80gb" before "a100".
      {"b200", {"NVIDIA B200", "sm_100", 148, 8000, 65536, 228 * kKiB, 180}},
      {"h200", {"NVIDIA H200", "sm_90", 132, 4800, 65536, 228 * kKiB, 141}},
      {"h100pcie", {"NVIDIA H100 PCIe", "sm_90", 114, 2000, 65536, 228 * kKiB, 80}},
      {"h100", {"NVIDIA H100 SXM", "sm_90", 132, 3350, 65536, 228 * kKiB, 80}},
      {"gh200", {"NVIDIA GH200", "sm_90", 132, 4000, 65536, 228 * kKiB, 96}},
      {"l40s", {"NVIDIA L40S", "sm_89", 142, 864, 65536, 100 * kKiB, 48}},
      {"l4", {"NVIDIA L4", "sm_89", 58, 300, 65536, 100 * kKiB, 24}},
      {"rtx4090", {"NVIDIA GeForce RTX 4090", "sm_89", 128, 1008, 65536, 100 * kKiB, 24}},
      {"a100", {"NVIDIA A100", "sm_80", 108, 2039, 65536, 164 * kKiB, 80}},
      {"a10g", {"NVIDIA A10G", "sm_86", 80, 600, 65536, 100 * kKiB, 24}},
      {"rtx3090", {"NVIDIA GeForce RTX 3090", "sm_86", 82, 936, 65536, 100 * kKiB, 24}},
      {"v100", {"NVIDIA V100", "sm_70", 80, 900, 65536, 96 * kKiB, 32}},
      {"t4", {"NVIDIA T4", "sm_75", 40, 320, 65536, 64 * kKiB, 16}},
  };
  return kTable;
}

}  // namespace

std::optional<GpuSpec> gpu_spec(std::string_view name) {
  const std::string s = slug(name);
  if (s.empty()) return std::nullopt;
  for (const auto& [key, spec] : gpu_table())
    if (s.find(key) != std::string::npos) return spec;
  return std::nullopt;
}

CpuSpec local_cpu() {
  CpuSpec cpu;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon != std::string::npos)
      cpu.model = line.substr(colon + 1 + (colon + 1 < line.size() && line[colon + 1] == ' '));
    break;
  }
  if (cpu.model.empty()) cpu.model = "unknown CPU";
  cpu.cores = static_cast<int64_t>(std::thread::hardware_concurrency());
  return cpu;
}

std::string hardware_summary(proto::Backend backend, std::string_view gpu_name) {
  if (backend != proto::Backend::kCuda) {
    CpuSpec cpu = local_cpu();
    return "CPU: " + cpu.model + ", " + std::to_string(cpu.cores) +
           " logical cores; the kernel is built with g++ -O3 -march=native -fopenmp.\n";
  }
  auto spec = gpu_spec(gpu_name);
  if (!spec) return "GPU: " + std::string(gpu_name) + " (no figures known for it).\n";
  return "GPU: " + spec->name + " (" + spec->arch + "), " + std::to_string(spec->sm_count) + " SMs, " +
         std::to_string(spec->memory_gib) + " GiB at about " +
         std::to_string(static_cast<int64_t>(spec->memory_bandwidth_gbs)) + " GB/s; per SM " +
         std::to_string(spec->registers_per_sm) + " 32-bit registers and " +
         std::to_string(spec->shared_bytes_per_sm / 1024) + " KiB of shared memory.\n";
}

}  // namespace kiln::llm
