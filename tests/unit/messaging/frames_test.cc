// The broker protocol's framing (libs/messaging/frames.h) over real ZeroMQ sockets on inproc: what a
// well-formed message looks like on both sides, and that every malformed one is refused and drained whole,
// so the next message reads cleanly.
#include <catch2/catch.hpp>

#include <zmq.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kiln/messaging/frames.h"
#include "kiln/proto/wire.h"

using namespace kiln;
using namespace kiln::messaging;

namespace {

struct Pair {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  zmq::socket_t dealer{ctx, zmq::socket_type::dealer};
  explicit Pair(const std::string& name) {
    router.bind("inproc://" + name);
    dealer.set(zmq::sockopt::routing_id, "worker-1");
    dealer.connect("inproc://" + name);
  }
  // The next message on the router, waiting up to a second for it to arrive.
  std::optional<Result<Envelope>> next(std::string* identity = nullptr) {
    for (int i = 0; i < 1000; ++i) {
      auto got = recv_envelope(router, true, identity);
      if (got) return got;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return std::nullopt;
  }
  void send_raw(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      dealer.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
};

const std::string kTag(proto::kProtocolTag);

}  // namespace

TEST_CASE("an envelope goes out and comes back with the sender's identity", "[messaging]") {
  Pair p("frames-roundtrip");
  REQUIRE(send_envelope(p.dealer, "", proto::cmd::kReady, std::string("body\0bytes", 10)).is_ok());
  auto got = p.next();
  REQUIRE(got.has_value());
  REQUIRE(got->is_ok());
  CHECK((*got)->identity == "worker-1");
  CHECK((*got)->command == proto::cmd::kReady);
  CHECK((*got)->body == std::string("body\0bytes", 10));
  CHECK((*got)->user_id.empty());  // no CURVE here

  // And back from the router to that identity.
  REQUIRE(send_envelope(p.router, "worker-1", proto::cmd::kAck, "ok").is_ok());
  std::optional<Result<Envelope>> back;
  for (int i = 0; i < 1000 && !back; ++i) {
    back = recv_envelope(p.dealer, false);
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(back.has_value());
  REQUIRE(back->is_ok());
  CHECK((*back)->command == proto::cmd::kAck);
  CHECK((*back)->body == "ok");
}

TEST_CASE("nothing to read is not an error", "[messaging]") {
  Pair p("frames-empty");
  CHECK_FALSE(recv_envelope(p.router, true).has_value());
}

TEST_CASE("malformed messages are refused with the reason and drained whole", "[messaging]") {
  Pair p("frames-malformed");
  struct Case {
    std::vector<std::string> frames;
    std::string reason;
  };
  std::vector<Case> cases = {
      {{"KILN0", std::string(proto::cmd::kReady), "x"}, "bad protocol tag"},
      {{kTag, "NOPE", "x"}, "unknown command 'NOPE'"},
      {{kTag, std::string("\x01\xff", 2), "x"}, "unknown command '0x01ff'"},
      {{kTag, std::string(proto::cmd::kReady)}, "expected 4 frames, got 3"},
      {{kTag, std::string(proto::cmd::kReady), "a", "b", "c", "d", "e"}, "too many frames"},
  };
  for (const auto& c : cases) {
    INFO("expected: " << c.reason);
    p.send_raw(c.frames);
    // A well-formed message right behind the bad one must read cleanly: the bad one was drained whole.
    REQUIRE(send_envelope(p.dealer, "", proto::cmd::kHeartbeat, "").is_ok());
    std::string identity;
    auto bad = p.next(&identity);
    REQUIRE(bad.has_value());
    REQUIRE_FALSE(bad->is_ok());
    CHECK(bad->status().message() == c.reason);
    CHECK(identity == "worker-1");  // the peer can be named in the log
    auto good = p.next();
    REQUIRE(good.has_value());
    REQUIRE(good->is_ok());
    CHECK((*good)->command == proto::cmd::kHeartbeat);
  }
}

TEST_CASE("routing ids print as themselves when printable, else as bounded hex", "[messaging]") {
  CHECK(printable_identity("compiler-abc-7") == "compiler-abc-7");
  CHECK(printable_identity(std::string("\x00\x80\x01", 3)) == "0x008001");
  CHECK(printable_identity(std::string(100, 'a')).size() == 2 + 32);  // first 16 bytes only
  CHECK(printable_identity("") == "0x");
}

TEST_CASE("ids echoed and logged must be well-formed UTF-8 without control characters", "[messaging]") {
  CHECK(is_printable_utf8("c/p1:compile"));
  CHECK(is_printable_utf8(""));
  CHECK(is_printable_utf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5"));  // 2-, 3- and 4-byte sequences
  CHECK_FALSE(is_printable_utf8("\xff"));
  CHECK_FALSE(is_printable_utf8("\xc3"));              // cut short
  CHECK_FALSE(is_printable_utf8("\xc0\x80"));          // overlong NUL
  CHECK_FALSE(is_printable_utf8("\xe0\x80\xaf"));      // overlong '/'
  CHECK_FALSE(is_printable_utf8("\xed\xa0\x80"));      // a surrogate
  CHECK_FALSE(is_printable_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  CHECK_FALSE(is_printable_utf8("a\nb"));
  CHECK_FALSE(is_printable_utf8(std::string("a\0b", 3)));
  CHECK_FALSE(is_printable_utf8("\x7f"));
  CHECK_FALSE(is_printable_utf8("\xc2\x85"));  // C1 control (NEL)
}
