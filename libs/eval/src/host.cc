#include "kiln/eval/host.h"

#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "kiln/proto/ids.h"

namespace kiln::eval {
namespace {

constexpr size_t kFallbackCacheBytes = 64u << 20;
// sysconf may report the sum of every L3 of the package (508 MiB on one EPYC guest) while a core only
// fills the one it shares. The flush runs on one core, so more than this would cost time and evict nothing.
constexpr size_t kMaxSysconfCacheBytes = 128u << 20;

std::string trim(std::string s) {
  size_t b = s.find_first_not_of(" \t\n");
  size_t e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The value of the first "key : value" line of /proc/cpuinfo whose key is `key`.
std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return {};
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return trim(line);
}

// "32768K", "2M", "1048576" -> bytes.
size_t parse_cache_size(const std::string& text) {
  if (text.empty()) return 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end && (*end == 'K' || *end == 'k')) v <<= 10;
  if (end && (*end == 'M' || *end == 'm')) v <<= 20;
  return static_cast<size_t>(v);
}

}  // namespace

std::string cpu_model_name() {
  for (const char* key : {"model name", "Model", "Hardware", "cpu model"}) {
    std::string v = cpuinfo_field(key);
    if (!v.empty()) return v;
  }
  return "unknown CPU";
}

double cpu_clock_hz() {
  std::string mhz = cpuinfo_field("cpu MHz");
  if (!mhz.empty()) return std::strtod(mhz.c_str(), nullptr) * 1e6;
  std::string khz = read_line("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  if (!khz.empty()) return std::strtod(khz.c_str(), nullptr) * 1e3;
  return 0;
}

size_t last_level_cache_bytes() {
  size_t best = 0;
  int best_level = -1;
  for (int index = 0; index < 8; ++index) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::string level = read_line(dir + "level");
    if (level.empty()) break;
    if (read_line(dir + "type") == "Instruction") continue;
    int lv = std::atoi(level.c_str());
    size_t size = parse_cache_size(read_line(dir + "size"));
    if (size > 0 && lv >= best_level) {
      best_level = lv;
      best = size;
    }
  }
  if (best > 0) return best;
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    long v = sysconf(name);
    if (v > 0) return std::min(static_cast<size_t>(v), kMaxSysconfCacheBytes);
  }
  return kFallbackCacheBytes;
}

bool evict_from_caches(const void* p, size_t bytes) {
  constexpr uintptr_t kLine = 64;  // the smallest line of both; a larger one is evicted more than once
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~(kLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
#if defined(__x86_64__)
  _mm_mfence();
  for (uintptr_t a = first; a < end; a += kLine) _mm_clflush(reinterpret_cast<const void*>(a));
  _mm_mfence();
  return true;
#elif defined(__aarch64__)
  asm volatile("dsb ish" ::: "memory");
  for (uintptr_t a = first; a < end; a += kLine) asm volatile("dc civac, %0" ::"r"(a) : "memory");
  asm volatile("dsb ish" ::: "memory");
  return true;
#else
  (void)first;
  (void)end;
  return false;
#endif
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

proto::WorkerInfo cpu_worker_info() {
  proto::WorkerInfo w;
  w.backend = proto::Backend::kCpu;
  w.device_name = cpu_model_name();
  w.clock_hz = cpu_clock_hz();
  w.host = host_name();
  return w;
}

}  // namespace kiln::eval
