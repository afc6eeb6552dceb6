// The broker's metrics (DESIGN §8): the Prometheus series it exports and the plain counters tests read.
// Every event is counted in one call that moves both, with label values from fixed sets only (a peer
// can never add a series by what it sends; service labels come from JobQueue::service_label).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace kiln::broker {

struct BrokerCounters {
  std::atomic<int64_t> rejected_frames{0};
  std::atomic<int64_t> duplicate_submits{0};
  std::atomic<int64_t> duplicate_followups{0};
  std::atomic<int64_t> late_results{0};
  std::atomic<int64_t> requeued{0};
  std::atomic<int64_t> dead{0};
  std::atomic<int64_t> completed{0};
  std::atomic<int64_t> bridge_messages{0};       // received on the external endpoint
  std::atomic<int64_t> bridge_auth_failures{0};  // CURVE clients the ZAP handler refused
  std::atomic<int64_t> allowlist_reloads{0};     // successful (re)loads, the first one included
  std::atomic<int64_t> store_write_failures{0};  // job-table writes that failed (disk or table full)
  std::atomic<bool> store_writable{true};        // false from a failed write until one succeeds
  std::atomic<int64_t> refused_results{0};       // RESULTs refused (their jobs released at once)
  std::atomic<int64_t> bytes_in{0};              // message bodies received, every command
  std::atomic<int64_t> bytes_out{0};             // message bodies sent, every command
  std::atomic<int64_t> blob_bytes{0};            // blob-store requests and replies (part of the two above)
};

// Why a message was rejected: the label of kiln_broker_rejected_frames_total, a fixed set whatever the
// message said (each series exists from the start, at 0).
enum class Rejection {
  kMalformed,        // frame count, protocol tag or command
  kOversized,        // a body over max_message_bytes
  kInvalidName,      // a service name (or worker id) outside the allowed length and charset
  kTooManyServices,  // a new service past JobQueue::kMaxServices
  kTooManyWorkers,   // a READY past max_workers
  kBadReady,
  kBadResult,
  kBadSubmit,
  kBadRequest,
  kBadReply,
  kForbidden,         // a bridge doing what bridges may not
  kRevoked,           // a bridge no longer on the allowlist
  kStoreUnavailable,  // a SUBMIT refused because the job table cannot take writes
};
std::string_view rejection_label(Rejection r);

// The label of kiln_jobs_requeued_total for a requeue reason ("worker lost: silent for 4.0 s" ->
// "worker_lost"): a fixed set, whatever the reason's details.
std::string requeue_reason_label(const std::string& reason);

// Why a job died: the `reason` label of kiln_jobs_dead_total. The broker gave up after max_attempts, or the
// worker dead-lettered it (a permanent fault that is not the candidate's).
enum class DeadReason { kMaxAttempts, kWorker };
std::string_view dead_reason_label(DeadReason r);

class BrokerMetrics {
 public:
  // Registers every family on `registry`, which must outlive this object.
  explicit BrokerMetrics(prometheus::Registry& registry);
  BrokerMetrics(const BrokerMetrics&) = delete;
  BrokerMetrics& operator=(const BrokerMetrics&) = delete;

  const BrokerCounters& counters() const { return counters_; }

  // Message bodies through the broker's sockets (kiln_broker_bytes_total{direction, command}); `command`
  // is one the frames layer accepted (a fixed set).
  void bytes_received(std::string_view command, size_t bytes);
  void bytes_sent(std::string_view command, size_t bytes);
  // Requests to the blob store and their replies (kiln_broker_blob_bytes_total), a part of the above.
  void blob_bytes(size_t bytes);

  // Per service (label from JobQueue::service_label).
  void set_service_gauges(const std::string& service, double queued, double leased, double workers);
  void set_queue_depth(const std::string& service, double queued);
  // Removes every series labelled with `service` (a service the queue forgot), so that services that come
  // and go do not grow /metrics.
  void drop_service(const std::string& service);
  void job_completed(const std::string& service, bool ok);
  void job_requeued(const std::string& service, const std::string& reason);
  void job_dead(const std::string& service, DeadReason reason);
  void lease_ended(const std::string& service, double leased_for_s);
  void job_leased(const std::string& service, double waited_s);

  // Dropped duplicates.
  void duplicate_submit();
  void duplicate_followups(int64_t n);
  void late_result();

  void rejected(Rejection why);
  void result_refused() { counters_.refused_results++; }
  void disconnect(std::string_view endpoint);

  // The job table: a failed write by operation ("insert", "lease", "requeue", "complete"), and whether it
  // takes writes. set_store_writable returns the previous state.
  void store_write_failed(std::string_view op);
  bool set_store_writable(bool writable);
  // Retention (retention.h): ended jobs deleted, and the file's size after the pass.
  void jobs_pruned(int64_t n);
  void set_table_bytes(int64_t bytes);

  // External bridges.
  void bridge_message(const std::string& bridge);
  void bridge_auth_failure();
  void allowlist_loaded(size_t keys);

 private:
  BrokerCounters counters_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Family<prometheus::Gauge>* jobs_leased_;
  prometheus::Family<prometheus::Gauge>* workers_connected_;
  prometheus::Family<prometheus::Counter>* completed_total_;
  prometheus::Family<prometheus::Counter>* requeued_total_;
  prometheus::Family<prometheus::Counter>* dead_total_;
  prometheus::Family<prometheus::Counter>* rejected_total_;
  prometheus::Family<prometheus::Counter>* store_failures_total_;
  prometheus::Gauge* store_writable_;
  prometheus::Counter* pruned_total_;
  prometheus::Gauge* table_bytes_;
  prometheus::Family<prometheus::Counter>* disconnects_total_;
  prometheus::Family<prometheus::Counter>* duplicates_total_;
  prometheus::Family<prometheus::Histogram>* duration_;
  prometheus::Family<prometheus::Histogram>* queue_wait_;
  prometheus::Family<prometheus::Counter>* bridge_messages_;
  prometheus::Counter* bridge_auth_failures_;
  // By command; looked up with the received command's view, no string made per message.
  std::map<std::string, prometheus::Counter*, std::less<>> bytes_in_, bytes_out_;
  prometheus::Counter* blob_bytes_;
  prometheus::Gauge* bridge_keys_;
};

}  // namespace kiln::broker
