#include "baselines.h"

#include <cblas.h>

#include <climits>

namespace kiln::eval::detail {
namespace {

std::string shape_text(const HostTensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape().size(); ++i) s += (i ? "," : "") + std::to_string(t.shape()[i]);
  return s + "]";
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// C[M,N] = A[M,K] * B[K,N], row-major fp32: inputs[0], inputs[1] -> outputs[0].
Status check_sgemm(const std::vector<HostTensor>& in, const std::vector<HostTensor>& out) {
  const std::string want = "openblas_sgemm: expects fp32 inputs A[M,K], B[K,N] and output C[M,N]";
  if (in.size() < 2 || out.empty()) return invalid_argument(want);
  const HostTensor &a = in[0], &b = in[1], &c = out[0];
  for (const HostTensor* t : {&a, &b, &c}) {
    if (t->dtype() != task::DType::kF32 || t->shape().size() != 2) return invalid_argument(want);
    if (!fits_int(t->shape()[0]) || !fits_int(t->shape()[1])) return invalid_argument(want + ": too large");
  }
  if (a.shape()[1] != b.shape()[0] || c.shape()[0] != a.shape()[0] || c.shape()[1] != b.shape()[1]) {
    return invalid_argument(want + ", got " + shape_text(a) + " " + shape_text(b) + " -> " + shape_text(c));
  }
  return Status::ok();
}

void run_sgemm(const kiln_args* a) {
  const int m = static_cast<int>(a->inputs[0].shape[0]);
  const int k = static_cast<int>(a->inputs[0].shape[1]);
  const int n = static_cast<int>(a->inputs[1].shape[1]);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, static_cast<const float*>(a->inputs[0].data), k,
              static_cast<const float*>(a->inputs[1].data), n, 0.0f, static_cast<float*>(a->outputs[0].data), n);
}

constexpr Baseline kBaselines[] = {
    {"openblas_sgemm", check_sgemm, run_sgemm},
};

}  // namespace

const Baseline* find_baseline(const std::string& name) {
  for (const Baseline& b : kBaselines) {
    if (name == b.name) return &b;
  }
  return nullptr;
}

std::string known_baselines() {
  std::string s;
  for (const Baseline& b : kBaselines) s += (s.empty() ? "" : ", ") + std::string(b.name);
  return s;
}

}  // namespace kiln::eval::detail
