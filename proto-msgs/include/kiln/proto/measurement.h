// What a measurement says on the wire: the statistics of a contestant's samples, a benchmark case's
// timing (candidate, reference and baselines, the speedup and its interval), correctness and the
// performance section of a TestReport (payloads.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::proto {

struct Stats {
  int64_t n = 0;
  double median_us = 0, mean_us = 0, stdev_us = 0, cv = 0, p10_us = 0, p90_us = 0, min_us = 0, max_us = 0;
  template <class V>
  void fields(V& v) {
    v("n", n);
    v("median_us", median_us);
    v("mean_us", mean_us);
    v("stdev_us", stdev_us);
    v("cv", cv);
    v("p10_us", p10_us);
    v("p90_us", p90_us);
    v("min_us", min_us);
    v("max_us", max_us);
  }
};

struct BaselineTiming {
  std::string name;
  Stats stats;
  double speedup = 0;  // baseline median / candidate median
  // Optional (schema 4): the speedup's 95 % interval from the paired samples, as for the reference (not
  // widened for reproducibility). 0 from an older evaluator.
  double speedup_lo = 0;
  double speedup_hi = 0;
  template <class V>
  void fields(V& v) {
    v("name", name);
    v("stats", stats);
    v("speedup", speedup);
    v("speedup_lo", speedup_lo);
    v("speedup_hi", speedup_hi);
  }
};

struct CaseTiming {
  std::map<std::string, int64_t> dims;
  Stats candidate;
  Stats reference;
  std::vector<BaselineTiming> baselines;
  double speedup = 0;     // reference median / candidate median
  double speedup_lo = 0;  // 95 % interval from the paired samples
  double speedup_hi = 0;
  int64_t warmup_iters = 0;
  std::string stop_reason;  // noise | stalled | max_time | screened
  // Optional (schema 3): wall time of the timing rounds of this case, from the first round to the last (the
  // device is busy with the contestants, nothing else, meanwhile). 0 from an older evaluator.
  double timing_s = 0;
  template <class V>
  void fields(V& v) {
    v("dims", dims);
    v("candidate", candidate);
    v("reference", reference);
    v("baselines", baselines);
    v("speedup", speedup);
    v("speedup_lo", speedup_lo);
    v("speedup_hi", speedup_hi);
    v("warmup_iters", warmup_iters);
    v("stop_reason", stop_reason);
    v("timing_s", timing_s);
  }
};

struct Correctness {
  bool passed = false;
  double max_abs_error = 0;
  double max_rel_error = 0;
  int64_t mismatches = 0;
  double rtol = 0, atol = 0;
  std::vector<std::string> tested_shapes;     // "B=16,H=4097"
  std::vector<std::string> first_mismatches;  // "y[17]: got 1.5 expected 1.25 (B=1,H=4096 seed 3)"
  template <class V>
  void fields(V& v) {
    v("passed", passed);
    v("max_abs_error", max_abs_error);
    v("max_rel_error", max_rel_error);
    v("mismatches", mismatches);
    v("rtol", rtol);
    v("atol", atol);
    v("tested_shapes", tested_shapes);
    v("first_mismatches", first_mismatches);
  }
};

struct Performance {
  bool measured = false;
  std::string method;  // host_clock | cuda_events
  std::string mode;    // cold | warm
  std::vector<CaseTiming> cases;
  template <class V>
  void fields(V& v) {
    v("measured", measured);
    v("method", method);
    v("mode", mode);
    v("cases", cases);
  }
};

}  // namespace kiln::proto
