// A worker of the broker protocol: READY with its credit, jobs run on `slots` threads, results with
// follow-ups, heartbeats both ways, reconnect with a fresh socket and backoff when the broker goes quiet.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/messaging/frames.h"
#include "kiln/messaging/handler.h"
#include "kiln/proto/wire.h"

namespace kiln::messaging {

struct WorkerOptions {
  std::string endpoint = "tcp://127.0.0.1:5555";
  std::string service;
  std::string worker_id;
  int slots = 1;
  proto::Capabilities caps;
  double heartbeat_interval_s = 1.0;
  int heartbeat_liveness = 4;    // broker presumed dead after this many silent intervals
  double reconnect_min_s = 1.0;  // backoff doubles up to reconnect_max_s
  double reconnect_max_s = 32.0;
  SocketOptions socket;
};

struct WorkerStats {
  std::atomic<int64_t> jobs_done{0};
  std::atomic<int64_t> requests_answered{0};
  std::atomic<int64_t> reconnects{0};
  std::atomic<int64_t> rejected_frames{0};
  // ACKs with an error: the broker refused this worker's READY or one of its RESULTs (and said why).
  std::atomic<int64_t> refusals{0};
};

class Worker {
 public:
  Worker(zmq::context_t& context, WorkerOptions options, JobHandler job_handler, RequestHandler request_handler = {});
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Serves until `stop` becomes true; then waits up to `drain_timeout_s` for running jobs (their results
  // are sent), sends DISCONNECT and returns. A job that fails once `stop` is set gets no RESULT, whatever
  // its handler said (the stop signal may have killed the job's children): the DISCONNECT gives it back.
  void run(const std::atomic<bool>& stop, double drain_timeout_s = 5.0);

  const WorkerStats& stats() const { return stats_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  WorkerStats stats_;
};

}  // namespace kiln::messaging
