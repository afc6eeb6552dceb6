// A test status in a test's messages: a failed check prints its word ("crashed == ok"), not the enum's
// number. Every test file that checks a proto::TestStatus includes this, so a test binary has one way to
// print one.
#pragma once

#include <catch2/catch.hpp>

#include <optional>
#include <string>

#include "kiln/proto/ids.h"

namespace kiln::testing {

// "ok", "crashed", ...; "(no status)" for a report without one.
inline std::string status_word(const std::optional<proto::TestStatus>& status) {
  return status ? std::string(proto::name(*status)) : std::string("(no status)");
}

}  // namespace kiln::testing

namespace Catch {

template <>
struct StringMaker<kiln::proto::TestStatus> {
  static std::string convert(kiln::proto::TestStatus status) { return kiln::testing::status_word(status); }
};

template <>
struct StringMaker<std::optional<kiln::proto::TestStatus>> {
  static std::string convert(const std::optional<kiln::proto::TestStatus>& status) {
    return kiln::testing::status_word(status);
  }
};

}  // namespace Catch
