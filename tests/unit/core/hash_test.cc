#include <catch2/catch.hpp>

#include "kiln/core/files.h"
#include "kiln/core/hash.h"

TEST_CASE("sha256 matches the FIPS 180-2 test vector", "[core]") {
  CHECK(kiln::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(kiln::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("hash_files depends on names and contents, not on split points", "[core]") {
  std::map<std::string, std::string> a{{"a", "bc"}}, b{{"ab", "c"}}, c{{"a", "bc"}};
  CHECK(kiln::hash_files(a) != kiln::hash_files(b));
  CHECK(kiln::hash_files(a) == kiln::hash_files(c));
}

TEST_CASE("write_file_atomic replaces a file whole", "[core]") {
  kiln::TempDir dir;
  std::string p = dir.path() + "/f.json";
  REQUIRE(kiln::write_file_atomic(p, "one").is_ok());
  REQUIRE(kiln::write_file_atomic(p, "two").is_ok());
  auto r = kiln::read_file(p);
  REQUIRE(r.is_ok());
  CHECK(*r == "two");
  CHECK_FALSE(kiln::read_file(dir.path() + "/missing").is_ok());
}
