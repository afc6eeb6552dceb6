// Bodies of the broker protocol (DESIGN §2). A frame on the wire is ["KILN1"][command][msgpack body].
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/proto/codec.h"
#include "kiln/proto/ids.h"

namespace kiln::proto {

inline constexpr std::string_view kProtocolTag = "KILN1";

namespace cmd {
inline constexpr std::string_view kReady = "READY";
inline constexpr std::string_view kJob = "JOB";
inline constexpr std::string_view kResult = "RESULT";
inline constexpr std::string_view kHeartbeat = "HEARTBEAT";
inline constexpr std::string_view kDisconnect = "DISCONNECT";
inline constexpr std::string_view kSubmit = "SUBMIT";
inline constexpr std::string_view kAck = "ACK";
inline constexpr std::string_view kRequest = "REQUEST";
inline constexpr std::string_view kReply = "REPLY";
}  // namespace cmd

// What a worker can do; the broker routes on service name and logs the rest.
struct Capabilities {
  std::optional<Backend> backend;  // "cuda" | "cpu" | "" (none: not an evaluation worker)
  std::string gpu_name;            // "NVIDIA H200"
  std::string gpu_uuid;
  std::string arch;       // "sm_90", "x86_64"
  std::string toolchain;  // "nvcc 13.0", "g++ 12.2.0"
  std::string host;
  // Evaluation workers: "confined" when candidates run confined (DESIGN §5), else "UNCONFINED: <why>" or
  // "refuses to evaluate: <why>"; "" for other workers.
  std::string confinement;
  template <class V>
  void fields(V& v) {
    v("backend", backend);
    v("gpu_name", gpu_name);
    v("gpu_uuid", gpu_uuid);
    v("arch", arch);
    v("toolchain", toolchain);
    v("host", host);
    v("confinement", confinement);
  }
};

struct Ready {
  std::string service;
  std::string worker_id;  // unique per process start
  int slots = 1;          // credit: the most jobs this worker holds at once
  Capabilities caps;
  // Optional (v2): this worker's heartbeat period. The broker watches the worker with the longer of its own
  // period and this one, and sends it heartbeats at the shorter, so a worker configured apart from the
  // broker is neither dropped nor left thinking the broker is gone. 0: the broker's own period.
  double heartbeat_interval_s = 0;
  template <class V>
  void fields(V& v) {
    v("service", service);
    v("worker_id", worker_id);
    v("slots", slots);
    v("caps", caps);
    v("heartbeat_interval_s", heartbeat_interval_s);
  }
};

struct Job {
  std::string job_id;
  int attempt = 1;
  std::string service;
  Bytes payload;
  double deadline = 0;  // wall-clock seconds: the lease ends then
  template <class V>
  void fields(V& v) {
    v("job_id", job_id);
    v("attempt", attempt);
    v("service", service);
    v("payload", payload);
    v("deadline", deadline);
  }
};

// A follow-up job enqueued in the same transaction that completes its parent.
struct FollowUp {
  std::string service;
  std::string job_id;  // deterministic (candidate id + stage): a duplicate is dropped
  Bytes payload;
  double timeout_s = 0;  // lease length; 0 = the service's default
  // A worker id this job should not go to while another worker of its service is connected: a
  // confirming measurement runs on another tester (another GPU) when there is one. Empty: any worker.
  std::string avoid_worker;
  // The device model (a worker's READY gpu_name) the job must run on; empty: any. A confirming
  // measurement names the model of the first measurement: it waits for a worker of that model, up to the
  // broker's device_wait_s, rather than run on another model whose figures would not count.
  std::string device;
  template <class V>
  void fields(V& v) {
    v("service", service);
    v("job_id", job_id);
    v("payload", payload);
    v("timeout_s", timeout_s);
    v("avoid_worker", avoid_worker);
    v("device", device);
  }
};

// A follow-up job for `service` carrying an encoded payload, with the service's default lease.
inline FollowUp follow_up(std::string_view service, std::string job_id, std::string payload) {
  FollowUp f;
  f.service = std::string(service);
  f.job_id = std::move(job_id);
  f.payload.data = std::move(payload);
  return f;
}

namespace outcome {
inline constexpr std::string_view kOk = "ok";          // done; enqueue `next`
inline constexpr std::string_view kFailed = "failed";  // done, failed for good; `next` still enqueued
inline constexpr std::string_view kRetry = "retry";    // give it back: attempt+1 (dead after max_attempts)
}  // namespace outcome

struct ResultMsg {
  std::string job_id;
  int attempt = 1;
  std::string outcome = "ok";
  Bytes payload;
  std::string error;
  std::vector<FollowUp> next;
  template <class V>
  void fields(V& v) {
    v("job_id", job_id);
    v("attempt", attempt);
    v("outcome", outcome);
    v("payload", payload);
    v("error", error);
    v("next", next);
  }
};

struct Heartbeat {
  template <class V>
  void fields(V&) {}
};

struct Disconnect {
  std::string reason;
  template <class V>
  void fields(V& v) {
    v("reason", reason);
  }
};

struct Submit {
  std::string service;
  std::string job_id;  // client-chosen; resubmitting the same id is a no-op
  Bytes payload;
  double timeout_s = 0;
  // Scheduling: the broker hands out higher priorities first and, within one, lets campaigns take turns;
  // the job's follow-ups inherit both. Brokers that predate them ignore them (every job FIFO).
  int64_t priority = 0;  // kMinPriority..kMaxPriority
  std::string campaign;  // a campaign id (ids.h is_campaign_id) or empty
  template <class V>
  void fields(V& v) {
    v("service", service);
    v("job_id", job_id);
    v("payload", payload);
    v("timeout_s", timeout_s);
    v("priority", priority);
    v("campaign", campaign);
  }
};
inline constexpr int64_t kMinPriority = -1000;
inline constexpr int64_t kMaxPriority = 1000;

struct Ack {
  std::string job_id;
  bool accepted = false;
  bool duplicate = false;
  std::string error;
  // The refusal is temporary (e.g. the broker's job table cannot take writes): the same SUBMIT may be
  // sent again later. False for refusals that retrying cannot fix (a bad service name, a bad message).
  bool retryable = false;
  template <class V>
  void fields(V& v) {
    v("job_id", job_id);
    v("accepted", accepted);
    v("duplicate", duplicate);
    v("error", error);
    v("retryable", retryable);
  }
};

// A non-durable query routed to a service ("broker" is answered by the broker itself).
struct Request {
  std::string request_id;
  std::string service;
  std::string method;  // e.g. "status", "campaign", "best"
  Bytes body;
  double timeout_s = 5;
  template <class V>
  void fields(V& v) {
    v("request_id", request_id);
    v("service", service);
    v("method", method);
    v("body", body);
    v("timeout_s", timeout_s);
  }
};

struct Reply {
  std::string request_id;
  bool ok = false;
  Bytes body;
  std::string error;
  template <class V>
  void fields(V& v) {
    v("request_id", request_id);
    v("ok", ok);
    v("body", body);
    v("error", error);
  }
};

// --- Broker queries (service "broker")

struct QueueStatus {
  std::string service;
  int64_t queued = 0;
  int64_t leased = 0;
  int64_t done = 0;
  int64_t failed = 0;
  int64_t dead = 0;
  int64_t workers = 0;
  // Queued jobs that need a device model (FollowUp::device) no connected worker of the service has, by
  // model: they wait, up to broker.device_wait_s.
  std::map<std::string, int64_t> waiting_for_device;
  template <class V>
  void fields(V& v) {
    v("service", service);
    v("queued", queued);
    v("leased", leased);
    v("done", done);
    v("failed", failed);
    v("dead", dead);
    v("workers", workers);
    v("waiting_for_device", waiting_for_device);
  }
};

struct WorkerStatus {
  std::string service;
  std::string worker_id;
  int slots = 0;
  int64_t in_flight = 0;
  Capabilities caps;
  template <class V>
  void fields(V& v) {
    v("service", service);
    v("worker_id", worker_id);
    v("slots", slots);
    v("in_flight", in_flight);
    v("caps", caps);
  }
};

struct BrokerStatus {
  std::vector<QueueStatus> queues;
  std::vector<WorkerStatus> workers;
  int64_t rejected_frames = 0;
  template <class V>
  void fields(V& v) {
    v("queues", queues);
    v("workers", workers);
    v("rejected_frames", rejected_frames);
  }
};

struct JobStatusQuery {
  std::string job_id;
  template <class V>
  void fields(V& v) {
    v("job_id", job_id);
  }
};

struct JobStatus {
  std::string job_id;
  std::string service;
  std::string state;  // queued | leased | done | failed | dead | unknown
  int attempt = 0;
  std::string error;
  Bytes result;  // the RESULT payload of a finished job, while kept
  template <class V>
  void fields(V& v) {
    v("job_id", job_id);
    v("service", service);
    v("state", state);
    v("attempt", attempt);
    v("error", error);
    v("result", result);
  }
};

// The broker's blob store (DESIGN §1): content named by its sha256, put once by whoever has it and fetched
// by whoever needs it ("blob.put" with a Blob, answered with an empty body; "blob.get" with a BlobQuery,
// answered with the Blob; "blob.has" with a BlobQuery, answered with an empty body when the store holds it
// and an error when not, so a writer sends content the store already has only once). Task packages (TaskFiles) and
// built references travel this way, so a job names them instead of carrying them.
struct Blob {
  std::string sha256;  // lowercase hex sha256 of `data`
  Bytes data;
  template <class V>
  void fields(V& v) {
    v("sha256", sha256);
    v("data", data);
  }
};

struct BlobQuery {
  std::string sha256;
  template <class V>
  void fields(V& v) {
    v("sha256", sha256);
  }
};

// Broker methods of the blob store.
namespace blob_method {
inline constexpr std::string_view kPut = "blob.put";
inline constexpr std::string_view kGet = "blob.get";
inline constexpr std::string_view kHas = "blob.has";
}  // namespace blob_method

}  // namespace kiln::proto
