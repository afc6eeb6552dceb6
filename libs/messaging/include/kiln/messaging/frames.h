// Frames of the broker protocol: ["KILN1"][command][msgpack body] (a ROUTER sees [identity] first).
#pragma once

#include <zmq.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/core/status.h"

namespace kiln::messaging {

// CURVE on the client side (DESIGN §2, external bridges): all three keys are Z85 text (40 characters).
// Empty server_public_key means a plain (NULL mechanism) connection.
struct CurveClientKeys {
  std::string server_public_key;
  std::string public_key;
  std::string secret_key;
  bool enabled() const { return !server_public_key.empty(); }
};

struct SocketOptions {
  int64_t max_message_bytes = 64ll << 20;  // ZMQ_MAXMSGSIZE: a larger frame drops the peer
  int linger_ms = 0;
  int reconnect_ivl_ms = 1000;
  int reconnect_ivl_max_ms = 32000;
  int sndhwm = 10000;
  int rcvhwm = 10000;
  CurveClientKeys curve;  // set by a worker or client connecting to the broker's external endpoint
};

void apply_options(zmq::socket_t& socket, const SocketOptions& options);

struct Envelope {
  std::string identity;  // routing id (ROUTER side only)
  std::string command;
  std::string body;
  std::string user_id;  // the ZAP handler's user id of the sender (CURVE endpoints); empty otherwise
};

// Sends one envelope; `identity` is used when non-empty (ROUTER). Returns unavailable when the peer is
// unreachable (ROUTER_MANDATORY) or the send would block.
Status send_envelope(zmq::socket_t& socket, std::string_view identity, std::string_view command, std::string_view body);

// Receives one multipart message without blocking. nullopt: nothing to read. An error Status: a
// malformed message (wrong tag, frame count, unknown command); it has been fully drained either way.
// `identity` is filled even for malformed messages from a ROUTER, so the caller can log the peer.
std::optional<Result<Envelope>> recv_envelope(zmq::socket_t& socket, bool router, std::string* identity = nullptr);

bool is_known_command(std::string_view command);

// Printable form of a routing id for logs.
std::string printable_identity(std::string_view identity);

// Is `s` text that may be echoed in a reply's msgpack str field and written to a log line: well-formed
// UTF-8 (no overlong forms, surrogates or code points past U+10FFFF) without control characters (C0, DEL,
// C1)? Job and request ids must be.
bool is_printable_utf8(std::string_view s);

}  // namespace kiln::messaging
