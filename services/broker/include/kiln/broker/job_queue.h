// The broker's job queue (DESIGN §1-2): the bookkeeping over the durable job table, with no socket in
// sight. It keeps the jobs that are queued or leased, the workers that hold leases and their credit, and
// decides every change of a job: lease to a worker, requeue with attempt + 1 (worker lost, deadline
// passed, worker gave it back), dead-letter past max_attempts (with a dead letter for the scorer),
// completion with its follow-ups in one transaction. Time comes from an injected clock, and everything it
// must tell the world (a job to send, a state change to publish) goes through a QueueListener, so tests
// drive it alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/broker/fair_queue.h"
#include "kiln/broker/job_table.h"
#include "kiln/broker/metrics.h"
#include "kiln/broker/options.h"
#include "kiln/core/status.h"
#include "kiln/log/rate_limit.h"
#include "kiln/proto/wire.h"

namespace kiln::broker {

// A job that is queued or leased (done, failed and dead jobs live in the table only).
struct LiveJob {
  std::string id;
  std::string service;
  std::string payload;
  int attempt = 1;
  double timeout_s = 0;
  bool leased = false;
  std::string worker;         // identity holding the lease
  double lease_deadline = 0;  // monotonic
  double enqueued_mono = 0;
  double leased_mono = 0;
  std::string avoid_worker;    // a worker id not to lease it to while the service has another worker
  std::string device;          // the device model (Capabilities::gpu_name) of the workers that may take it
  double no_device_since = 0;  // monotonic: since when no worker of `device` serves its service; 0: one does
  int64_t priority = 0;        // JobRow::priority, campaign: its place in its service's FairQueue
  std::string campaign;
};

// A registered worker: what it serves, its credit and the leases it holds, and when it was last heard
// from and written to (heartbeats).
struct Worker {
  std::string identity;  // the peer key of its connection
  std::string service;
  std::string worker_id;
  std::string bridge;  // the allowlist name of an external bridge; empty for internal workers
  int slots = 1;
  proto::Capabilities caps;
  std::set<std::string> leased;
  double last_seen = 0;
  double last_sent = 0;
  double heartbeat_s = 0;  // the worker's own heartbeat period (READY); 0: the broker's
};

struct ServiceQueue {
  FairQueue queued;  // job ids, in hand-out order (fair_queue.h)
  std::vector<std::string> workers;
  size_t rr = 0;
  bool served = false;   // a worker has registered for it: it has series of its own from then on
  uint64_t touched = 0;  // when a job was last queued or a worker came or went (JobQueue's own counter)
};

// What the queue tells the world. The broker sends and publishes; tests record.
class QueueListener {
 public:
  virtual ~QueueListener() = default;
  // A job changed state: "queued", "leased", "done", "failed" or "dead" (the events feed).
  virtual void job_state(const std::string& job_id, const std::string& service, std::string_view state,
                         int attempt) = 0;
  // A job leased to the worker `identity` must reach it. The listener may find the worker unreachable
  // and remove it (JobQueue::remove_worker) before returning.
  virtual void deliver(const std::string& identity, const proto::Job& job) = 0;
  // A worker was removed; its leases were given back already.
  virtual void worker_removed(const std::string& identity) = 0;
};

class JobQueue {
 public:
  using Clock = std::function<double()>;  // monotonic seconds

  // Service names become metric label values and table rows: 1-64 bytes of [A-Za-z0-9._-], and at most
  // kMaxServices distinct ones besides the known ones (Kiln's own and those the config names), so a peer
  // cannot make /metrics unparseable or grow it without bound, nor crowd out the services Kiln runs on.
  // Their slots are taken back when needed: a queue with no job and no worker is dropped, and then the
  // queue without a worker that has waited longest (its jobs fail, saying why).
  static constexpr size_t kMaxServiceName = 64;
  static constexpr size_t kMaxServices = 256;
  // The per-service label of every service that is not known and has never had a worker: jobs submitted
  // to names nobody serves share one series. '~' is outside the service-name charset: no collision.
  static constexpr std::string_view kOtherServiceLabel = "~other";
  // How far down its queue a worker looks for a job it may take.
  static constexpr size_t kDispatchScan = 64;

  // `options` and `metrics` must outlive the queue.
  JobQueue(JobTable table, const BrokerOptions& options, BrokerMetrics& metrics, Clock clock);
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // None (the default): deliveries and state changes go nowhere.
  void set_listener(QueueListener* listener) { listener_ = listener; }

  // Queues the jobs a previous run left active (JobTable::load_active); those that were leased go back to
  // the queue, their workers being gone. Returns how many were leased.
  size_t resume(std::vector<JobRow> active);

  // ---- services
  static bool valid_service_name(std::string_view name);
  // A new service name must be valid, and there may be only so many: invalid_argument or
  // resource_exhausted (every other service has a worker) says which. At the limit it frees a slot first:
  // drops the queues with no job and no worker, else fails the jobs of the unserved queue untouched longest.
  Status admit_service(const std::string& name);
  // The label a service's series carry: its name when it is known or has had a worker, else the shared one.
  std::string service_label(const std::string& service) const;

  // ---- jobs
  // Inserts and queues a new job. False: a job with that id exists (a duplicate, counted). An error: the
  // table cannot take writes (counted and logged; the job is not queued).
  Result<bool> submit(JobRow row);
  // Leases queued jobs to the workers of their service within their credit, workers in round robin, jobs
  // in their queue's order (fair_queue.h: priority, then campaigns in turn, then FIFO).
  void dispatch();

  // A RESULT from `identity` for (job_id, attempt). kEnded: it answers the lease this worker holds; the
  // lease is over (its slot is free, its duration observed) and the caller must requeue() or complete()
  // the job. Otherwise it is counted as late and dropped; kUnknownWorker: the peer is not registered.
  enum class LeaseEnd { kEnded, kLate, kUnknownWorker };
  LeaseEnd end_lease(const std::string& identity, const std::string& job_id, int attempt);
  // Gives back the job `job_id` if it is leased to `identity` (a RESULT too broken to read names it):
  // requeued with `reason`. False when it is not.
  bool release(const std::string& identity, const std::string& job_id, const std::string& reason);
  // Puts a job back in the queue with attempt + 1, or dead-letters it past max_attempts. `worker_retry`:
  // the worker itself gave it back, naming a fault of its own side in `reason`.
  void requeue(std::string job_id, const std::string& reason, bool worker_retry = false);
  // Records a job's result (done, failed, or dead when its worker dead-lettered it and sent the scorer's
  // DeadLetter among `next`) and queues its follow-ups, in one transaction; follow-ups
  // whose ids exist already are dropped as duplicates. When the table cannot record it, the job goes
  // back to the queue instead and the error is returned.
  Status complete(const std::string& job_id, JobState final_state, const std::string& result, const std::string& error,
                  const std::vector<proto::FollowUp>& next);

  // ---- workers
  // Registers a worker (a READY). One already registered under the same identity is removed first (its
  // leases requeued); past max_workers new ones are refused (resource_exhausted).
  Status add_worker(Worker worker);
  // Removes a worker and requeues the jobs it held.
  void remove_worker(const std::string& identity, const std::string& reason);
  const Worker* worker(const std::string& identity) const;
  // The next worker of `service` in round robin (a forwarded request goes to it); empty when none.
  std::string next_worker(const std::string& service);
  void heard_from(const std::string& identity);  // any message counts as a heartbeat
  void wrote_to(const std::string& identity);

  // ---- timers
  // Retries the dead letters a failed write left pending, removes the workers silent for too long,
  // requeues the leases past their deadline, and dead-letters the jobs that have waited device_wait_s for
  // a worker of the device model they need.
  void check_timers();
  // Workers owed a heartbeat now.
  std::vector<std::string> heartbeats_due() const;
  // The shortest heartbeat period owed to anyone (the broker's own, or a connected worker's shorter one).
  double shortest_heartbeat_s() const { return shortest_heartbeat_s_; }
  // Ends the throttled logs' intervals (their summaries).
  void flush_logs() { store_log_.flush(); }

  // ---- read access (status queries)
  const std::unordered_map<std::string, LiveJob>& jobs() const { return jobs_; }
  const std::map<std::string, ServiceQueue>& services() const { return services_; }
  const std::unordered_map<std::string, Worker>& workers() const { return workers_; }
  // Whether a worker of the device model `job` needs (LiveJob::device) serves its service now.
  bool device_served(const LiveJob& job) const;
  JobTable& table() { return table_; }

 private:
  double lease_for(const LiveJob& job) const;
  void enqueue(LiveJob job);
  void enqueue_row(JobRow row);
  void dead_letter(const LiveJob& job, const std::string& reason, bool worker_retry);
  bool may_take(const LiveJob& job, const Worker& w, const ServiceQueue& q) const;
  bool waited_too_long(LiveJob& job, double now);
  void fail_unserved_device(const std::string& job_id);
  bool store_ok(std::string_view op, const std::string& what, const Status& st);
  void update_gauges(const std::string& service);
  size_t custom_services() const;
  void drop_idle_services();
  bool evict_unserved_service(const std::string& for_service);
  void drop_service(std::map<std::string, ServiceQueue>::iterator it);
  void update_other_gauges();
  void update_shortest_heartbeat();
  void publish(const LiveJob& job, std::string_view state);

  JobTable table_;
  const BrokerOptions& opt_;
  BrokerMetrics& metrics_;
  Clock clock_;
  QueueListener* listener_ = nullptr;
  log::ThrottledLog store_log_;

  std::unordered_map<std::string, LiveJob> jobs_;  // queued and leased only
  std::map<std::string, ServiceQueue> services_;
  std::set<std::string, std::less<>> known_services_;  // always admitted, never counted against kMaxServices
  std::unordered_map<std::string, Worker> workers_;    // by identity
  uint64_t activity_ = 0;                              // ServiceQueue::touched's clock
  double shortest_heartbeat_s_ = 0;
  // Jobs to dead-letter whose record could not be written (the table refused writes): retried on every
  // timer tick, so none is lost from memory or leased again past max_attempts.
  struct PendingDeath {
    LiveJob job;
    std::string reason;
    bool worker_retry = false;
  };
  std::vector<PendingDeath> pending_deaths_;
};

}  // namespace kiln::broker
