// Rate-limited logging: a flood of one kind of event (bad frames from a fuzzer, a full disk refusing
// every write) must not become a flood of log lines. Each reason may log `burst` lines per interval; the
// rest are counted, and one summary line per reason says how many were left out once its interval ends.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::log {

struct RateLimitOptions {
  int burst = 5;  // lines per reason per interval
  double interval_s = 1.0;
  // Reasons are meant to be a fixed set; past this many distinct ones, new reasons share one bucket
  // (kOtherReason) so a caller that passes something unbounded cannot grow the table.
  size_t max_reasons = 64;
};

class RateLimiter {
 public:
  // Seconds on a monotonic clock; injected so tests control time.
  using Clock = std::function<double()>;
  static constexpr std::string_view kOtherReason = "other";

  explicit RateLimiter(RateLimitOptions options = {}, Clock clock = {});

  // True when an event of `reason` may be logged now; false when it is counted as suppressed.
  bool admit(std::string_view reason);

  struct Suppressed {
    std::string reason;
    int64_t count = 0;
    double window_s = 0;  // how long the interval that left them out lasted
  };
  // Ends every interval that is over and returns how many events each left out (reasons with none are
  // not listed). Call it from a periodic timer so the summary comes even when the flood stops.
  std::vector<Suppressed> roll();

  int64_t suppressed_total() const { return suppressed_total_; }

 private:
  struct Window {
    double start = 0;
    int logged = 0;
    int64_t suppressed = 0;
  };
  using Windows = std::map<std::string, Window, std::less<>>;
  Windows::iterator window_for(std::string_view reason, double now);

  RateLimitOptions options_;
  Clock clock_;
  Windows windows_;
  std::vector<Suppressed> pending_;  // summaries of windows that admit() closed, for the next roll()
  int64_t suppressed_total_ = 0;
};

// A RateLimiter that writes through spdlog: warn()/error() log when admitted, and flush() writes one
// summary line per reason that had lines left out ("<n> more '<reason>' <what> in the last <t> s were not
// logged").
class ThrottledLog {
 public:
  explicit ThrottledLog(std::string what, RateLimitOptions options = {}, RateLimiter::Clock clock = {})
      : what_(std::move(what)), limiter_(options, std::move(clock)) {}

  template <class... Args>
  void log(spdlog::level::level_enum level, std::string_view reason, spdlog::format_string_t<Args...> fmt,
           Args&&... args) {
    flush();
    if (limiter_.admit(reason)) spdlog::log(level, fmt, std::forward<Args>(args)...);
  }
  template <class... Args>
  void warn(std::string_view reason, spdlog::format_string_t<Args...> fmt, Args&&... args) {
    log(spdlog::level::warn, reason, fmt, std::forward<Args>(args)...);
  }
  template <class... Args>
  void error(std::string_view reason, spdlog::format_string_t<Args...> fmt, Args&&... args) {
    log(spdlog::level::err, reason, fmt, std::forward<Args>(args)...);
  }
  // Writes the summaries of intervals that are over.
  void flush();
  int64_t suppressed_total() const { return limiter_.suppressed_total(); }

 private:
  std::string what_;
  RateLimiter limiter_;
};

}  // namespace kiln::log
