// What a worker's logic looks like to the messaging layer: a job in, an outcome with follow-ups out.
// Service handler libraries implement these and never touch a socket, so tests call them directly.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/proto/wire.h"

namespace kiln::messaging {

struct JobOutcome {
  std::string outcome = "ok";  // proto::outcome::kOk | kFailed | kRetry
  std::string payload;         // result payload (encoded message), kept by the broker while the job is
  std::string error;           // one line for failed / retry
  std::vector<proto::FollowUp> next;

  static JobOutcome ok(std::vector<proto::FollowUp> next = {}, std::string payload = {}) {
    JobOutcome o;
    o.next = std::move(next);
    o.payload = std::move(payload);
    return o;
  }
  static JobOutcome failed(std::string error, std::vector<proto::FollowUp> next = {}) {
    JobOutcome o;
    o.outcome = "failed";
    o.error = std::move(error);
    o.next = std::move(next);
    return o;
  }
  static JobOutcome retry(std::string error) {
    JobOutcome o;
    o.outcome = "retry";
    o.error = std::move(error);
    return o;
  }
};

// Called on a worker thread, at most `slots` at once. Must not throw (a throw becomes `retry`).
using JobHandler = std::function<JobOutcome(const proto::Job& job)>;

// Answers a non-durable query (method + body) with a reply body. Called on the I/O thread: keep it quick.
using RequestHandler = std::function<Result<std::string>(const proto::Request& request)>;

}  // namespace kiln::messaging
