// A client of the broker: SUBMIT durable jobs, REQUEST non-durable queries. One thread at a time.
#pragma once

#include <zmq.hpp>

#include <memory>
#include <string>

#include "kiln/core/status.h"
#include "kiln/messaging/frames.h"
#include "kiln/proto/wire.h"

namespace kiln::messaging {

class Client {
 public:
  Client(zmq::context_t& context, std::string endpoint, SocketOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Submits a job and waits for the ACK. Resubmitting the same job id is answered as a duplicate.
  Result<proto::Ack> submit(const proto::Submit& submit, double timeout_s = 5.0);

  // Sends a query to `service` ("broker" for the broker itself) and returns the reply body.
  Result<std::string> request(const std::string& service, const std::string& method, const std::string& body,
                              double timeout_s = 5.0);

 private:
  Result<Envelope> wait_for(std::string_view command, double timeout_s);
  void reset_socket();

  zmq::context_t& ctx_;
  std::string endpoint_;
  SocketOptions options_;
  std::unique_ptr<zmq::socket_t> socket_;
  uint64_t next_request_ = 1;
};

}  // namespace kiln::messaging
