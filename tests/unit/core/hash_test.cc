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

TEST_CASE("hmac_sha256 matches the RFC 4231 test vectors", "[core]") {
  CHECK(kiln::hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block size is hashed first.
  CHECK(kiln::hmac_sha256_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First") ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(kiln::constant_time_equal("abc", "abc"));
  CHECK_FALSE(kiln::constant_time_equal("abc", "abd"));
  CHECK_FALSE(kiln::constant_time_equal("abc", "abcd"));
  auto a = kiln::random_bytes(32), b = kiln::random_bytes(32);
  CHECK(a.size() == 32);
  CHECK(a != b);
}
