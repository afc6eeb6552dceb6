// Program 0 of the caching integration-test task: a cache keyed on the input's address and four sampled
// values, the way a proposer writes "compute once, reuse".
#include <kiln/kernel_abi.h>

#include <cstring>

#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef THREADS
#define THREADS 1
#endif

// [EVOLVE_START]
constexpr long kMax = 1 << 17;
static const float* g_x = nullptr;
static long g_n = -1;
static float g_key[4];
static float g_cache[kMax];
static void scale(const float* x, float* y, long n, float alpha) {
  const float key[4] = {x[0], x[n / 3], x[n / 2], x[n - 1]};
  if (x == g_x && n == g_n && std::memcmp(key, g_key, sizeof key) == 0) {
    std::memcpy(y, g_cache, n * sizeof(float));
    return;
  }
  for (long i = 0; i < n; i += UNROLL)
    for (long u = 0; u < UNROLL && i + u < n; ++u) y[i + u] = alpha * x[i + u];
  if (n <= kMax) {
    std::memcpy(g_cache, y, n * sizeof(float));
    g_x = x;
    g_n = n;
    std::memcpy(g_key, key, sizeof key);
  }
}
// [EVOLVE_END]

extern "C" int kiln_entry(const kiln_args* a) {
  scale(static_cast<const float*>(a->inputs[0].data), static_cast<float*>(a->outputs[0].data),
        a->inputs[0].shape[0], static_cast<float>(kiln_scalar(a, "alpha", 1.0)));
  return 0;
}
