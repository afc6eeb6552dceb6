#include "kiln/messaging/client.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "kiln/core/time.h"

namespace kiln::messaging {

Client::Client(zmq::context_t& context, std::string endpoint, SocketOptions options)
    : ctx_(context), endpoint_(std::move(endpoint)), options_(options) {
  reset_socket();
}

Client::~Client() = default;

void Client::reset_socket() {
  socket_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
  apply_options(*socket_, options_);
  socket_->connect(endpoint_);
}

Result<Envelope> Client::wait_for(std::string_view command, double timeout_s) {
  double deadline = monotonic_s() + timeout_s;
  while (true) {
    double left = deadline - monotonic_s();
    if (left <= 0) break;
    zmq::pollitem_t items[] = {{static_cast<void*>(*socket_), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 1, std::chrono::milliseconds(static_cast<long>(left * 1000) + 1));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    while (true) {
      auto env = recv_envelope(*socket_, false);
      if (!env) break;
      if (!env->is_ok()) continue;
      if (env->value().command == command) return std::move(*env).value();
    }
  }
  // A reply that arrives after we gave up must not be mistaken for the next one's.
  reset_socket();
  return deadline_exceeded("no " + std::string(command) + " from the broker at " + endpoint_ + " within " +
                           std::to_string(static_cast<int>(timeout_s)) + " s (is it running?)");
}

Result<proto::Ack> Client::submit(const proto::Submit& submit, double timeout_s) {
  KILN_RETURN_IF_ERROR(send_envelope(*socket_, "", proto::cmd::kSubmit, proto::encode(submit)));
  double deadline = monotonic_s() + timeout_s;
  while (true) {
    auto env = wait_for(proto::cmd::kAck, deadline - monotonic_s());
    if (!env.is_ok()) return env.status();
    auto ack = proto::decode<proto::Ack>(env->body);
    if (!ack.is_ok()) return ack.status().with_context("bad ACK from broker");
    // An ACK that names no job but an error answers this SUBMIT: the broker refused it unread (too large).
    if (ack->job_id == submit.job_id || (ack->job_id.empty() && !ack->error.empty())) return ack;
  }
}

Result<std::string> Client::request(const std::string& service, const std::string& method, const std::string& body,
                                    double timeout_s) {
  proto::Request req;
  req.request_id = std::to_string(::getpid()) + "-" + std::to_string(next_request_++);
  req.service = service;
  req.method = method;
  req.body = proto::Bytes{body};
  req.timeout_s = timeout_s;
  KILN_RETURN_IF_ERROR(send_envelope(*socket_, "", proto::cmd::kRequest, proto::encode(req)));
  double deadline = monotonic_s() + timeout_s + 0.5;  // the broker answers a timed-out request itself
  while (true) {
    auto env = wait_for(proto::cmd::kReply, deadline - monotonic_s());
    if (!env.is_ok()) return env.status();
    auto reply = proto::decode<proto::Reply>(env->body);
    if (!reply.is_ok()) return reply.status().with_context("bad REPLY from broker");
    if (reply->request_id != req.request_id) continue;  // a late reply to an earlier request
    if (!reply->ok) return unavailable(service + "." + method + ": " + reply->error);
    return std::move(reply->body.data);
  }
}

}  // namespace kiln::messaging
