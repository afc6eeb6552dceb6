#include <catch2/catch.hpp>

#include "kiln/core/status.h"

using kiln::Result;
using kiln::Status;
using kiln::StatusCode;

namespace {
Result<int> parse_positive(int x) {
  if (x <= 0) return kiln::invalid_argument("expected a positive integer, got " + std::to_string(x));
  return x;
}
Result<int> doubled(int x) {
  KILN_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}
}  // namespace

TEST_CASE("status carries code, message and context", "[core]") {
  Status st = kiln::invalid_argument("H: expected a positive integer").with_context("task.yaml");
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message() == "task.yaml: H: expected a positive integer");
  CHECK_FALSE(kiln::is_retryable(st.code()));
  CHECK(kiln::is_retryable(StatusCode::kUnavailable));
  CHECK(Status::ok().with_context("x").is_ok());
}

TEST_CASE("result propagates errors through KILN_ASSIGN_OR_RETURN", "[core]") {
  auto good = doubled(4);
  REQUIRE(good.is_ok());
  CHECK(*good == 8);
  auto bad = doubled(-1);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message().find("got -1") != std::string::npos);
}
