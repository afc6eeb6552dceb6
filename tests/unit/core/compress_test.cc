// Deflate for libraries on the wire: a round trip, and every way a stated size can lie is refused before
// memory is spent on it.
#include <catch2/catch.hpp>

#include <string>

#include "kiln/core/compress.h"

using namespace kiln;

TEST_CASE("deflated content inflates to itself", "[core][compress]") {
  std::string library(20000, '\0');
  for (size_t i = 0; i < library.size(); i += 7) library[i] = static_cast<char>(i * 31);
  const std::string deflated = deflate_bytes(library);
  REQUIRE_FALSE(deflated.empty());
  CHECK(deflated.size() < library.size());
  auto back = inflate_bytes(deflated, library.size(), library.size());
  REQUIRE(back.is_ok());
  CHECK(*back == library);
  CHECK(inflate_bytes(deflate_bytes(""), 0, 10).value().empty());
}

TEST_CASE("a stated size over the bound, a wrong size or bytes that are no stream are refused", "[core][compress]") {
  const std::string zeros(1 << 20, '\0');
  const std::string bomb = deflate_bytes(zeros);  // a kilobyte that would be a mebibyte
  auto over = inflate_bytes(bomb, zeros.size(), 4096);
  REQUIRE_FALSE(over.is_ok());
  CHECK(over.status().code() == StatusCode::kInvalidArgument);
  CHECK(over.status().message().find("over the bound") != std::string::npos);
  CHECK_FALSE(inflate_bytes(bomb, zeros.size() - 1, zeros.size()).is_ok());      // more than it says
  CHECK_FALSE(inflate_bytes(bomb, zeros.size() + 1, zeros.size() + 1).is_ok());  // less than it says
  CHECK_FALSE(inflate_bytes("not deflate at all", 18, 100).is_ok());
  CHECK_FALSE(inflate_bytes(bomb.substr(0, bomb.size() / 2), zeros.size(), zeros.size()).is_ok());
}
