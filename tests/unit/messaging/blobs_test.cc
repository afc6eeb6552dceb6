// The blob client against a transport of host functions: names checked, content cached within its bound.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "kiln/core/hash.h"
#include "kiln/messaging/blobs.h"
#include "kiln/proto/wire.h"

using namespace kiln;

namespace {

// A broker's blob store in a map, counting the round trips; `lie` makes it send other content than asked.
struct FakeStore {
  std::map<std::string, std::string> blobs;
  int calls = 0;
  int puts = 0;
  bool lie = false;
  bool down = false;
  messaging::BlobClient::Transport transport() {
    return [this](std::string_view method, const std::string& body) -> Result<std::string> {
      ++calls;
      if (down) return unavailable("broker: no answer");
      if (method == proto::blob_method::kPut) {
        auto b = proto::decode<proto::Blob>(body).value();
        blobs[b.sha256] = b.data.data;
        ++puts;
        return std::string();
      }
      auto q = proto::decode<proto::BlobQuery>(body).value();
      auto it = blobs.find(q.sha256);
      if (it == blobs.end()) return unavailable("no blob " + q.sha256);
      if (method == proto::blob_method::kHas) return std::string();
      return proto::encode(proto::Blob{q.sha256, proto::Bytes{lie ? it->second + "!" : it->second}});
    };
  }
};

}  // namespace

TEST_CASE("a blob is put once per name and fetched once per process", "[messaging][blobs]") {
  FakeStore store;
  messaging::BlobClient writer(store.transport());
  auto name = writer.put("package bytes");
  REQUIRE(name.is_ok());
  CHECK(*name == sha256_hex("package bytes"));
  CHECK(writer.put("package bytes").value() == *name);
  CHECK(store.calls == 2);  // asked whether the store has it, then put it
  CHECK(store.puts == 1);

  messaging::BlobClient reader(store.transport());
  for (int i = 0; i < 3; ++i) {
    auto got = reader.get(*name);
    REQUIRE(got.is_ok());
    CHECK(**got == "package bytes");
  }
  CHECK(reader.fetches() == 1);
  CHECK(store.calls == 3);

  // Another writer of the same content: the store has it, so it is not sent again.
  messaging::BlobClient second_writer(store.transport());
  CHECK(second_writer.put("package bytes").value() == *name);
  CHECK(store.puts == 1);
}

TEST_CASE("content that does not hash to its name is refused and not cached", "[messaging][blobs]") {
  FakeStore store;
  store.blobs[sha256_hex("real")] = "real";
  store.lie = true;
  messaging::BlobClient reader(store.transport());
  auto got = reader.get(sha256_hex("real"));
  REQUIRE_FALSE(got.is_ok());
  CHECK(got.status().code() == StatusCode::kUnavailable);
  CHECK(got.status().message().find("does not hash") != std::string::npos);
  store.lie = false;
  REQUIRE(reader.get(sha256_hex("real")).is_ok());
  CHECK(reader.fetches() == 2);
}

TEST_CASE("an unreachable store is a retryable error and a failed put is not remembered", "[messaging][blobs]") {
  FakeStore store;
  store.down = true;
  messaging::BlobClient client(store.transport());
  auto put = client.put("x");
  REQUIRE_FALSE(put.is_ok());
  CHECK(put.status().code() == StatusCode::kUnavailable);
  CHECK(client.get(sha256_hex("x")).status().code() == StatusCode::kUnavailable);
  store.down = false;
  REQUIRE(client.put("x").is_ok());
  CHECK(store.blobs.count(sha256_hex("x")) == 1);
}

TEST_CASE("the cache stays within its bound, dropping the least recently used", "[messaging][blobs]") {
  FakeStore store;
  const std::string a(600, 'a'), b(600, 'b'), c(600, 'c');
  for (const auto* s : {&a, &b, &c}) store.blobs[sha256_hex(*s)] = *s;
  messaging::BlobClient reader(store.transport(), 1300);  // room for two
  REQUIRE(reader.get(sha256_hex(a)).is_ok());
  REQUIRE(reader.get(sha256_hex(b)).is_ok());
  REQUIRE(reader.get(sha256_hex(a)).is_ok());  // a is now the most recent
  REQUIRE(reader.get(sha256_hex(c)).is_ok());  // drops b
  CHECK(reader.fetches() == 3);
  REQUIRE(reader.get(sha256_hex(a)).is_ok());
  CHECK(reader.fetches() == 3);
  REQUIRE(reader.get(sha256_hex(b)).is_ok());
  CHECK(reader.fetches() == 4);
}
