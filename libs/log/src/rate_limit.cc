#include "kiln/log/rate_limit.h"

#include <chrono>

namespace kiln::log {

namespace {
double steady_now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

RateLimiter::RateLimiter(RateLimitOptions options, Clock clock)
    : options_(options), clock_(clock ? std::move(clock) : Clock(steady_now_s)) {}

RateLimiter::Windows::iterator RateLimiter::window_for(std::string_view reason, double now) {
  auto it = windows_.find(reason);
  if (it != windows_.end()) return it;
  if (windows_.size() >= options_.max_reasons) reason = kOtherReason;
  return windows_.try_emplace(std::string(reason), Window{now, 0, 0}).first;
}

bool RateLimiter::admit(std::string_view reason) {
  const double now = clock_();
  auto it = window_for(reason, now);
  Window& w = it->second;
  if (now - w.start >= options_.interval_s) {
    if (w.suppressed > 0) pending_.push_back(Suppressed{it->first, w.suppressed, now - w.start});
    w = Window{now, 0, 0};
  }
  if (w.logged < options_.burst) {
    ++w.logged;
    return true;
  }
  ++w.suppressed;
  ++suppressed_total_;
  return false;
}

std::vector<RateLimiter::Suppressed> RateLimiter::roll() {
  const double now = clock_();
  std::vector<Suppressed> out = std::move(pending_);
  pending_.clear();
  for (auto& [key, w] : windows_) {
    if (now - w.start < options_.interval_s || w.suppressed == 0) continue;
    out.push_back(Suppressed{key, w.suppressed, now - w.start});
    w = Window{now, 0, 0};
  }
  return out;
}

void ThrottledLog::flush() {
  for (const auto& s : limiter_.roll())
    spdlog::warn("{} more '{}' {} in the last {:.1f} s were not logged", s.count, s.reason, what_, s.window_s);
}

}  // namespace kiln::log
