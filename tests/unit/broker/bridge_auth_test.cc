// Bridge authentication without sockets: what the ZAP handler answers for each request, and where an
// admitted bridge's results may lead.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kiln/broker/bridge_auth.h"
#include "kiln/messaging/curve.h"
#include "kiln/proto/payloads.h"

using namespace kiln;

namespace {

// A ZAP request (RFC 27) as libzmq sends it for a CURVE client with this raw public key.
std::vector<std::string> zap_request(const std::string& mechanism, const std::string& raw_key) {
  return {"1.0", "req-1", "kiln.bridges", "127.0.0.1", "", mechanism, raw_key};
}

std::string raw_public_key(const messaging::CurveKeyPair& k) {
  auto raw = messaging::decode_curve_key(k.public_key);
  REQUIRE(raw.is_ok());
  return *raw;
}

}  // namespace

TEST_CASE("bridge auth: the ZAP handler admits listed CURVE keys under their names, nothing else", "[broker][bridge]") {
  auto alice = messaging::generate_curve_keypair();
  auto mallory = messaging::generate_curve_keypair();
  REQUIRE(alice.is_ok());
  REQUIRE(mallory.is_ok());
  auto list = broker::Allowlist::parse("alice " + alice->public_key + "\n", "bridges.allow");
  REQUIRE(list.is_ok());

  auto ok = broker::judge_zap_request(zap_request("CURVE", raw_public_key(*alice)), *list);
  CHECK(ok.code == "200");
  CHECK(ok.user == "alice");

  auto unknown = broker::judge_zap_request(zap_request("CURVE", raw_public_key(*mallory)), *list);
  CHECK(unknown.code == "400");
  CHECK(unknown.user.empty());
  CHECK(unknown.text == "key not on the allowlist");

  auto plain = broker::judge_zap_request(zap_request("PLAIN", raw_public_key(*alice)), *list);
  CHECK(plain.code == "400");
  CHECK(plain.user.empty());

  auto short_key = broker::judge_zap_request(zap_request("CURVE", "short"), *list);
  CHECK(short_key.code == "400");

  auto wrong_version = zap_request("CURVE", raw_public_key(*alice));
  wrong_version[0] = "2.0";
  CHECK(broker::judge_zap_request(wrong_version, *list).code == "500");
  CHECK(broker::judge_zap_request({"1.0", "req-1"}, *list).code == "500");

  // An empty list (a missing file) admits no one.
  CHECK(broker::judge_zap_request(zap_request("CURVE", raw_public_key(*alice)), broker::Allowlist{}).code == "400");
}

TEST_CASE("bridge auth: a bridge's follow-ups go only to the open services, and to score only as results",
          "[broker][bridge]") {
  const std::vector<std::string> open = {"compile", "score"};
  proto::ScoreResult result;
  proto::DeadLetter dead;
  CHECK(broker::check_bridge_followup({"compile", "c/p1:compile", proto::Bytes{"x"}, 0, ""}, open).is_ok());
  CHECK(
      broker::check_bridge_followup({"score", "c/p1:noted", proto::Bytes{proto::encode(result)}, 0, ""}, open).is_ok());
  Status promote = broker::check_bridge_followup({"promote", "c/p1:promote", proto::Bytes{"x"}, 0, ""}, open);
  CHECK(promote.code() == StatusCode::kPermissionDenied);
  CHECK(promote.message() == "follow-up to 'promote' is not open to bridges");
  CHECK(broker::check_bridge_followup({"score", "dead:c/p1", proto::Bytes{proto::encode(dead)}, 0, ""}, open).code() ==
        StatusCode::kPermissionDenied);
  CHECK(broker::check_bridge_followup({"score", "c/p1:x", proto::Bytes{"not msgpack"}, 0, ""}, open).code() ==
        StatusCode::kPermissionDenied);
}
