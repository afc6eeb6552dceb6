#include "kiln/messaging/frames.h"

#include <spdlog/spdlog.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/core/hash.h"
#include "kiln/proto/wire.h"

namespace kiln::messaging {

namespace {
// A well-formed message has at most identity + tag + command + body.
constexpr size_t kMaxFrames = 4;
}  // namespace

void apply_options(zmq::socket_t& socket, const SocketOptions& options) {
  socket.set(zmq::sockopt::maxmsgsize, options.max_message_bytes);
  socket.set(zmq::sockopt::linger, options.linger_ms);
  socket.set(zmq::sockopt::reconnect_ivl, options.reconnect_ivl_ms);
  socket.set(zmq::sockopt::reconnect_ivl_max, options.reconnect_ivl_max_ms);
  socket.set(zmq::sockopt::sndhwm, options.sndhwm);
  socket.set(zmq::sockopt::rcvhwm, options.rcvhwm);
  if (options.curve.enabled()) {
    try {
      socket.set(zmq::sockopt::curve_serverkey, options.curve.server_public_key);
      socket.set(zmq::sockopt::curve_publickey, options.curve.public_key);
      socket.set(zmq::sockopt::curve_secretkey, options.curve.secret_key);
    } catch (const zmq::error_t& e) {
      // A malformed key leaves the socket without CURVE: a CURVE server refuses the handshake, so nothing
      // leaks; the caller validates keys up front (decode_curve_key) to fail with a clear line instead.
      spdlog::error("CURVE keys rejected by libzmq ({}): check the key files", e.what());
    }
  }
}

bool is_known_command(std::string_view c) {
  using namespace proto::cmd;
  return c == kReady || c == kJob || c == kResult || c == kHeartbeat || c == kDisconnect || c == kSubmit || c == kAck ||
         c == kRequest || c == kReply;
}

Status send_envelope(zmq::socket_t& socket, std::string_view identity, std::string_view command,
                     std::string_view body) {
  try {
    if (!identity.empty()) {
      if (!socket.send(zmq::buffer(identity.data(), identity.size()),
                       zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        return unavailable("send would block");
    }
    auto tag = proto::kProtocolTag;
    if (!socket.send(zmq::buffer(tag.data(), tag.size()), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
      return unavailable("send would block");
    socket.send(zmq::buffer(command.data(), command.size()), zmq::send_flags::sndmore);
    socket.send(zmq::buffer(body.data(), body.size()), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("send failed: ") + e.what());
  }
  return Status::ok();
}

std::optional<Result<Envelope>> recv_envelope(zmq::socket_t& socket, bool router, std::string* identity_out) {
  std::vector<std::string> frames;
  std::string user_id;
  bool too_many = false;
  try {
    zmq::message_t msg;
    auto got = socket.recv(msg, zmq::recv_flags::dontwait);
    if (!got) return std::nullopt;
    while (true) {
      // Set by the ZAP handler of a CURVE endpoint; libzmq attaches it to every frame of the message.
      if (user_id.empty()) {
        const char* uid = zmq_msg_gets(msg.handle(), "User-Id");
        if (uid != nullptr) user_id = uid;
      }
      if (frames.size() < kMaxFrames)
        frames.emplace_back(static_cast<const char*>(msg.data()), msg.size());
      else
        too_many = true;  // keep draining the rest of this message
      if (!msg.more()) break;
      msg.rebuild();
      (void)socket.recv(msg, zmq::recv_flags::none);
    }
  } catch (const zmq::error_t& e) {
    return Result<Envelope>(unavailable(std::string("recv failed: ") + e.what()));
  }
  size_t base = router ? 1 : 0;
  if (router && !frames.empty() && identity_out) *identity_out = frames[0];
  if (too_many) return Result<Envelope>(invalid_argument("too many frames"));
  if (frames.size() != base + 3)
    return Result<Envelope>(
        invalid_argument("expected " + std::to_string(base + 3) + " frames, got " + std::to_string(frames.size())));
  if (frames[base] != proto::kProtocolTag) return Result<Envelope>(invalid_argument("bad protocol tag"));
  if (!is_known_command(frames[base + 1]))
    return Result<Envelope>(invalid_argument("unknown command '" + printable_identity(frames[base + 1]) + "'"));
  Envelope env;
  if (router) env.identity = std::move(frames[0]);
  env.command = std::move(frames[base + 1]);
  env.body = std::move(frames[base + 2]);
  env.user_id = std::move(user_id);
  return Result<Envelope>(std::move(env));
}

std::string printable_identity(std::string_view id) {
  bool printable = !id.empty() && id.size() <= 64;
  for (unsigned char c : id)
    if (c < 0x20 || c > 0x7e) printable = false;
  if (printable) return std::string(id);
  return "0x" + to_hex(id.substr(0, 16));
}

namespace {

// The length of the UTF-8 sequence that starts with `lead` and the least code point it may encode
// (anything less is an overlong form); 0 for a byte no sequence starts with.
std::pair<size_t, uint32_t> utf8_sequence(unsigned char lead) {
  if (lead < 0x80) return {1, 0};
  if ((lead & 0xe0) == 0xc0) return {2, 0x80};
  if ((lead & 0xf0) == 0xe0) return {3, 0x800};
  if ((lead & 0xf8) == 0xf0) return {4, 0x10000};
  return {0, 0};
}

}  // namespace

bool is_printable_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const auto [n, least] = utf8_sequence(lead);
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? lead : lead & (0x7fu >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3fu);
    }
    if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) return false;
    i += n;
  }
  return true;
}

}  // namespace kiln::messaging
