// The broker's commands (DESIGN §2): what each message from a worker, client or bridge does. Decodes and
// checks the body, turns it into job-queue operations, answers (ACK, REPLY, DISCONNECT), forwards
// requests to the services that answer them, and counts and logs what it rejects. It writes through an
// Outbox and never touches a socket.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "kiln/broker/job_queue.h"
#include "kiln/broker/metrics.h"
#include "kiln/broker/options.h"
#include "kiln/log/rate_limit.h"
#include "kiln/messaging/frames.h"
#include "kiln/proto/wire.h"

namespace kiln::broker {

// Peers are keyed by a tag byte + their routing id, so the routing ids of the two ROUTER sockets (each
// generates its own) can never collide in the broker's tables.
constexpr char kInternalTag = 'i';
constexpr char kExternalTag = 'e';
inline bool is_external(const std::string& peer) { return !peer.empty() && peer[0] == kExternalTag; }
std::string printable_peer(const std::string& peer);

// Where the commands' messages go: the broker's sockets (or a test's recorder).
class Outbox {
 public:
  virtual ~Outbox() = default;
  // Sends one message to `peer`. A worker that cannot be reached is removed (JobQueue::remove_worker).
  virtual void send(const std::string& peer, std::string_view command, const std::string& body) = 0;
};

class Commands {
 public:
  // `options`, `queue`, `metrics` and `outbox` must outlive the object.
  Commands(const BrokerOptions& options, JobQueue& queue, BrokerMetrics& metrics, Outbox& outbox);
  Commands(const Commands&) = delete;
  Commands& operator=(const Commands&) = delete;

  // One message. Its identity is a peer key (tag + routing id); user_id names the bridge of an external
  // peer (its ZAP user id) and is empty for every other.
  void handle(const messaging::Envelope& env);
  // A body over max_message_bytes (but under the sockets' limit, so it was read): counted, logged, and a
  // SUBMIT answered; nothing in it is decoded.
  void refuse_oversized(const messaging::Envelope& env);
  // Counts a rejected message and logs it, throttled per reason.
  void reject(const std::string& peer, Rejection reason, const std::string& why);

  // Forwarded requests: those of a worker that went away, and those past their deadline, are answered
  // with an error.
  void fail_requests_to(const std::string& worker);
  void expire_requests();
  void flush_logs() { reject_log_.flush(); }

 private:
  struct PendingRequest {
    std::string client;  // identity
    std::string client_request_id;
    std::string worker;   // identity answering
    double deadline = 0;  // monotonic
  };

  void on_ready(const messaging::Envelope& env);
  void on_result(const messaging::Envelope& env);
  void on_submit(const messaging::Envelope& env);
  void on_request(const messaging::Envelope& env);
  void on_reply(const messaging::Envelope& env);
  void refuse_from_bridge(const messaging::Envelope& env);
  void refuse_ready(const std::string& peer, Rejection reason, const std::string& why);
  void tell_result_refused(const std::string& peer, const std::string& job_id, const std::string& why);
  void reply_error(const std::string& client, const std::string& request_id, const std::string& error);
  void ack(const std::string& peer, const proto::Ack& ack);

  const BrokerOptions& opt_;
  JobQueue& queue_;
  BrokerMetrics& metrics_;
  Outbox& out_;
  log::ThrottledLog reject_log_;
  std::unordered_map<std::string, PendingRequest> requests_;  // by forwarded request id
  uint64_t next_forward_id_ = 1;
};

}  // namespace kiln::broker
