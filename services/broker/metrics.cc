#include "kiln/broker/metrics.h"

#include "kiln/metrics/metrics.h"
#include "kiln/proto/wire.h"

namespace kiln::broker {

namespace {

constexpr Rejection kAllRejections[] = {
    Rejection::kMalformed,       Rejection::kOversized, Rejection::kInvalidName, Rejection::kTooManyServices,
    Rejection::kTooManyWorkers,  Rejection::kBadReady,  Rejection::kBadResult,   Rejection::kBadSubmit,
    Rejection::kBadRequest,      Rejection::kBadReply,  Rejection::kForbidden,   Rejection::kRevoked,
    Rejection::kStoreUnavailable};

// The job-table writes, the label of kiln_broker_store_write_failures_total.
// The commands of the protocol (frames.cc accepts no other), for the byte counters' label.
constexpr std::string_view kCommands[] = {proto::cmd::kReady,     proto::cmd::kJob,        proto::cmd::kResult,
                                          proto::cmd::kHeartbeat, proto::cmd::kDisconnect, proto::cmd::kSubmit,
                                          proto::cmd::kAck,       proto::cmd::kRequest,    proto::cmd::kReply};
constexpr std::string_view kStoreOps[] = {"insert", "lease", "requeue", "complete", "blob"};

}  // namespace

std::string_view rejection_label(Rejection r) {
  switch (r) {
    case Rejection::kMalformed: return "malformed";
    case Rejection::kOversized: return "oversized";
    case Rejection::kInvalidName: return "invalid_name";
    case Rejection::kTooManyServices: return "too_many_services";
    case Rejection::kTooManyWorkers: return "too_many_workers";
    case Rejection::kBadReady: return "bad_ready";
    case Rejection::kBadResult: return "bad_result";
    case Rejection::kBadSubmit: return "bad_submit";
    case Rejection::kBadRequest: return "bad_request";
    case Rejection::kBadReply: return "bad_reply";
    case Rejection::kForbidden: return "forbidden";
    case Rejection::kRevoked: return "revoked";
    case Rejection::kStoreUnavailable: return "store_unavailable";
  }
  return "malformed";
}

std::string_view dead_reason_label(DeadReason r) {
  switch (r) {
    case DeadReason::kMaxAttempts: return "max_attempts";
    case DeadReason::kWorker: return "worker";
  }
  return "max_attempts";
}

// Every value requeue_reason_label returns.
constexpr std::string_view kRequeueReasons[] = {
    "worker_lost", "deadline", "worker_disconnected", "unreachable", "result_refused", "store_unavailable", "retry"};

std::string requeue_reason_label(const std::string& reason) {
  if (reason.rfind("worker lost", 0) == 0) return "worker_lost";
  if (reason.rfind("deadline", 0) == 0) return "deadline";
  if (reason.rfind("worker disconnected", 0) == 0) return "worker_disconnected";
  if (reason.rfind("unreachable", 0) == 0) return "unreachable";
  if (reason.rfind("result refused", 0) == 0) return "result_refused";
  if (reason.rfind("the broker could not record", 0) == 0) return "store_unavailable";
  return "retry";
}

BrokerMetrics::BrokerMetrics(prometheus::Registry& registry) {
  using namespace prometheus;
  queue_depth_ =
      &BuildGauge().Name("kiln_queue_depth_jobs").Help("Jobs waiting for a worker, per service").Register(registry);
  jobs_leased_ = &BuildGauge().Name("kiln_jobs_leased").Help("Jobs leased to a worker, per service").Register(registry);
  workers_connected_ =
      &BuildGauge().Name("kiln_workers_connected").Help("Workers connected, per service").Register(registry);
  completed_total_ =
      &BuildCounter().Name("kiln_jobs_completed_total").Help("Jobs finished, by outcome").Register(registry);
  requeued_total_ =
      &BuildCounter().Name("kiln_jobs_requeued_total").Help("Jobs put back in the queue, by reason").Register(registry);
  dead_total_ = &BuildCounter()
                     .Name("kiln_jobs_dead_total")
                     .Help("Jobs dead-lettered, by reason: after max attempts, or by their worker")
                     .Register(registry);
  rejected_total_ = &BuildCounter()
                         .Name("kiln_broker_rejected_frames_total")
                         .Help("Malformed or unexpected messages rejected, by reason")
                         .Register(registry);
  for (Rejection why : kAllRejections) rejected_total_->Add({{"reason", std::string(rejection_label(why))}});
  store_failures_total_ = &BuildCounter()
                               .Name("kiln_broker_store_write_failures_total")
                               .Help("Job-table writes that failed (disk or table full), by operation")
                               .Register(registry);
  for (std::string_view op : kStoreOps) store_failures_total_->Add({{"op", std::string(op)}});
  store_writable_ = &BuildGauge()
                         .Name("kiln_broker_store_writable")
                         .Help(
                             "1 while the job table takes writes; 0 from a failed write until one succeeds (new jobs "
                             "are refused meanwhile)")
                         .Register(registry)
                         .Add({});
  store_writable_->Set(1);
  disconnects_total_ = &BuildCounter()
                            .Name("kiln_broker_disconnects_total")
                            .Help(
                                "Connections closed, by endpoint: peers leaving, and peers ZeroMQ dropped for a frame "
                                "over max_message_bytes")
                            .Register(registry);
  duplicates_total_ = &BuildCounter()
                           .Name("kiln_broker_duplicates_total")
                           .Help("Duplicate submits, follow-ups and late results dropped")
                           .Register(registry);
  duration_ =
      &BuildHistogram().Name("kiln_job_duration_seconds").Help("Lease to result, per service").Register(registry);
  queue_wait_ =
      &BuildHistogram().Name("kiln_job_queue_wait_seconds").Help("Enqueue to lease, per service").Register(registry);
  bridge_messages_ = &BuildCounter()
                          .Name("kiln_bridge_messages_total")
                          .Help("Messages received from external bridges, per bridge")
                          .Register(registry);
  bridge_auth_failures_ = &BuildCounter()
                               .Name("kiln_bridge_auth_failures_total")
                               .Help("CURVE clients refused by the allowlist")
                               .Register(registry)
                               .Add({});
  auto& bytes = BuildCounter()
                    .Name("kiln_broker_bytes_total")
                    .Help("Message bodies through the broker's sockets, by direction (in, out) and command")
                    .Register(registry);
  for (std::string_view command : kCommands) {
    const std::string name(command);
    bytes_in_[name] = &bytes.Add({{"direction", "in"}, {"command", name}});
    bytes_out_[name] = &bytes.Add({{"direction", "out"}, {"command", name}});
  }
  pruned_total_ = &BuildCounter()
                       .Name("kiln_broker_jobs_pruned_total")
                       .Help("Ended jobs deleted from the job table by retention")
                       .Register(registry)
                       .Add({});
  table_bytes_ = &BuildGauge()
                      .Name("kiln_broker_table_bytes")
                      .Help("Size of the job table's file (without its WAL), as of the last retention pass")
                      .Register(registry)
                      .Add({});
  blob_bytes_ = &BuildCounter()
                     .Name("kiln_broker_blob_bytes_total")
                     .Help("Blob-store requests and their replies (a part of kiln_broker_bytes_total)")
                     .Register(registry)
                     .Add({});
  bridge_keys_ = &BuildGauge()
                      .Name("kiln_bridge_allowlist_keys")
                      .Help("Keys on the external bridges' allowlist")
                      .Register(registry)
                      .Add({});
}

void BrokerMetrics::bytes_received(std::string_view command, size_t bytes) {
  counters_.bytes_in += static_cast<int64_t>(bytes);
  if (auto it = bytes_in_.find(command); it != bytes_in_.end()) it->second->Increment(static_cast<double>(bytes));
}

void BrokerMetrics::bytes_sent(std::string_view command, size_t bytes) {
  counters_.bytes_out += static_cast<int64_t>(bytes);
  if (auto it = bytes_out_.find(command); it != bytes_out_.end()) it->second->Increment(static_cast<double>(bytes));
}

void BrokerMetrics::jobs_pruned(int64_t n) { pruned_total_->Increment(static_cast<double>(n)); }

void BrokerMetrics::set_table_bytes(int64_t bytes) { table_bytes_->Set(static_cast<double>(bytes)); }

void BrokerMetrics::blob_bytes(size_t bytes) {
  counters_.blob_bytes += static_cast<int64_t>(bytes);
  blob_bytes_->Increment(static_cast<double>(bytes));
}

void BrokerMetrics::set_service_gauges(const std::string& service, double queued, double leased, double workers) {
  queue_depth_->Add({{"service", service}}).Set(queued);
  jobs_leased_->Add({{"service", service}}).Set(leased);
  workers_connected_->Add({{"service", service}}).Set(workers);
}

void BrokerMetrics::set_queue_depth(const std::string& service, double queued) {
  queue_depth_->Add({{"service", service}}).Set(queued);
}

void BrokerMetrics::drop_service(const std::string& service) {
  const prometheus::Labels s{{"service", service}};
  auto drop = [](auto* family, const prometheus::Labels& labels, auto&&... args) {
    if (family->Has(labels)) family->Remove(&family->Add(labels, args...));
  };
  drop(queue_depth_, s);
  drop(jobs_leased_, s);
  drop(workers_connected_, s);
  drop(duration_, s, metrics::duration_buckets_s());
  drop(queue_wait_, s, metrics::duration_buckets_s());
  for (const char* outcome : {"ok", "failed"}) drop(completed_total_, {{"service", service}, {"outcome", outcome}});
  for (std::string_view reason : kRequeueReasons)
    drop(requeued_total_, {{"service", service}, {"reason", std::string(reason)}});
  for (DeadReason reason : {DeadReason::kMaxAttempts, DeadReason::kWorker})
    drop(dead_total_, {{"service", service}, {"reason", std::string(dead_reason_label(reason))}});
}

void BrokerMetrics::job_completed(const std::string& service, bool ok) {
  counters_.completed++;
  completed_total_->Add({{"service", service}, {"outcome", ok ? "ok" : "failed"}}).Increment();
}

void BrokerMetrics::job_requeued(const std::string& service, const std::string& reason) {
  counters_.requeued++;
  requeued_total_->Add({{"service", service}, {"reason", requeue_reason_label(reason)}}).Increment();
}

void BrokerMetrics::job_dead(const std::string& service, DeadReason reason) {
  counters_.dead++;
  dead_total_->Add({{"service", service}, {"reason", std::string(dead_reason_label(reason))}}).Increment();
}

void BrokerMetrics::lease_ended(const std::string& service, double leased_for_s) {
  duration_->Add({{"service", service}}, metrics::duration_buckets_s()).Observe(leased_for_s);
}

void BrokerMetrics::job_leased(const std::string& service, double waited_s) {
  queue_wait_->Add({{"service", service}}, metrics::duration_buckets_s()).Observe(waited_s);
}

void BrokerMetrics::duplicate_submit() {
  counters_.duplicate_submits++;
  duplicates_total_->Add({{"kind", "submit"}}).Increment();
}

void BrokerMetrics::duplicate_followups(int64_t n) {
  counters_.duplicate_followups += n;
  duplicates_total_->Add({{"kind", "followup"}}).Increment(static_cast<double>(n));
}

void BrokerMetrics::late_result() {
  counters_.late_results++;
  duplicates_total_->Add({{"kind", "late_result"}}).Increment();
}

void BrokerMetrics::rejected(Rejection why) {
  counters_.rejected_frames++;
  rejected_total_->Add({{"reason", std::string(rejection_label(why))}}).Increment();
}

void BrokerMetrics::disconnect(std::string_view endpoint) {
  disconnects_total_->Add({{"endpoint", std::string(endpoint)}}).Increment();
}

void BrokerMetrics::store_write_failed(std::string_view op) {
  counters_.store_write_failures++;
  store_failures_total_->Add({{"op", std::string(op)}}).Increment();
}

bool BrokerMetrics::set_store_writable(bool writable) {
  store_writable_->Set(writable ? 1 : 0);
  return counters_.store_writable.exchange(writable);
}

void BrokerMetrics::bridge_message(const std::string& bridge) {
  counters_.bridge_messages++;
  bridge_messages_->Add({{"bridge", bridge}}).Increment();
}

void BrokerMetrics::bridge_auth_failure() {
  counters_.bridge_auth_failures++;
  bridge_auth_failures_->Increment();
}

void BrokerMetrics::allowlist_loaded(size_t keys) {
  counters_.allowlist_reloads++;
  bridge_keys_->Set(static_cast<double>(keys));
}

}  // namespace kiln::broker
