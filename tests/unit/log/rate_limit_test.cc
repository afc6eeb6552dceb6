// The log rate limiter with an injected clock: no sleeps, every step of time is chosen by the test.
#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>
#include <string>

#include "kiln/log/rate_limit.h"

using kiln::log::RateLimiter;
using kiln::log::RateLimitOptions;

namespace {

struct FakeClock {
  double now = 1000.0;
  RateLimiter::Clock fn() {
    return [this] { return now; };
  }
};

int admitted(RateLimiter& limiter, std::string_view reason, int events) {
  int n = 0;
  for (int i = 0; i < events; ++i) n += limiter.admit(reason) ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("a burst per reason is admitted, the rest counted, and the count summarized once", "[log]") {
  FakeClock clock;
  RateLimiter limiter(RateLimitOptions{3, 1.0, 64}, clock.fn());
  CHECK(admitted(limiter, "malformed", 1000) == 3);
  // Reasons are limited apart: one flooding does not silence another.
  CHECK(admitted(limiter, "oversized", 10) == 3);
  CHECK(limiter.suppressed_total() == 997 + 7);
  CHECK(limiter.roll().empty());  // the interval is not over yet

  clock.now += 1.0;
  auto summary = limiter.roll();
  REQUIRE(summary.size() == 2);
  CHECK(summary[0].reason == "malformed");
  CHECK(summary[0].count == 997);
  CHECK(summary[0].window_s == Approx(1.0));
  CHECK(summary[1].reason == "oversized");
  CHECK(summary[1].count == 7);
  CHECK(limiter.roll().empty());  // each suppressed event is summarized once

  // A new interval: a new burst.
  CHECK(admitted(limiter, "malformed", 5) == 3);
}

TEST_CASE("an event after the interval closes it and its summary waits for the next roll", "[log]") {
  FakeClock clock;
  RateLimiter limiter(RateLimitOptions{1, 10.0, 64}, clock.fn());
  CHECK(admitted(limiter, "bad_ready", 4) == 1);
  clock.now += 10.5;
  CHECK(limiter.admit("bad_ready"));  // opens a new interval
  auto summary = limiter.roll();
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].count == 3);
  CHECK(summary[0].window_s == Approx(10.5));
  CHECK_FALSE(limiter.admit("bad_ready"));
}

TEST_CASE("past max_reasons, new reasons share one bucket", "[log]") {
  FakeClock clock;
  RateLimiter limiter(RateLimitOptions{1, 1.0, 2}, clock.fn());
  CHECK(limiter.admit("a"));
  CHECK(limiter.admit("b"));
  CHECK(limiter.admit("c"));        // the shared bucket's first line
  CHECK_FALSE(limiter.admit("d"));  // same bucket
  CHECK_FALSE(limiter.admit("c"));
  clock.now += 1;
  auto summary = limiter.roll();
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].reason == std::string(RateLimiter::kOtherReason));
  CHECK(summary[0].count == 2);
}

TEST_CASE("ThrottledLog writes a burst and then one summary line", "[log]") {
  std::ostringstream out;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("captured", std::make_shared<spdlog::sinks::ostream_sink_st>(out)));
  FakeClock clock;
  {
    kiln::log::ThrottledLog log("rejected messages", RateLimitOptions{2, 1.0, 64}, clock.fn());
    for (int i = 0; i < 100; ++i) log.warn("malformed", "rejected message {}", i);
    clock.now += 2;
    log.flush();
    log.flush();
  }
  spdlog::set_default_logger(previous);
  const std::string text = out.str();
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  CHECK(lines == 3);
  CHECK(text.find("rejected message 0") != std::string::npos);
  CHECK(text.find("rejected message 1") != std::string::npos);
  CHECK(text.find("rejected message 2") == std::string::npos);
  CHECK(text.find("98 more 'malformed' rejected messages in the last 2.0 s were not logged") != std::string::npos);
}
