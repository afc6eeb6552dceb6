#include "kiln/broker/job_queue.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>

#include "kiln/core/strings.h"
#include "kiln/core/time.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"

namespace kiln::broker {

namespace {

constexpr std::string_view kKnownServices[] = {proto::svc::kPropose, proto::svc::kProposeExternal, proto::svc::kCompile,
                                               proto::svc::kTestCpu, proto::svc::kTestCuda,        proto::svc::kScore,
                                               proto::svc::kPromote, proto::svc::kIngest};

}  // namespace

JobQueue::JobQueue(JobTable table, const BrokerOptions& options, BrokerMetrics& metrics, Clock clock)
    : table_(std::move(table)),
      opt_(options),
      metrics_(metrics),
      clock_(std::move(clock)),
      store_log_("job-table errors", options.log_limits, clock_) {
  update_shortest_heartbeat();
  for (std::string_view s : kKnownServices) known_services_.emplace(s);
  for (const auto& [s, _] : opt_.lease_timeout_s)
    if (s != "default" && valid_service_name(s)) known_services_.insert(s);
  for (const auto* list : {&opt_.external_services, &opt_.external_followups})
    for (const auto& s : *list)
      if (valid_service_name(s)) known_services_.insert(s);
}

size_t JobQueue::resume(std::vector<JobRow> active) {
  size_t leased = 0;
  for (auto& row : active) {
    if (row.state == JobState::kLeased) {
      ++leased;
      (void)table_.requeue(row.id, row.attempt, "broker restarted");
    }
    LiveJob j;
    j.id = row.id;
    j.service = row.service;
    j.payload = std::move(row.payload);
    j.attempt = row.attempt;
    j.timeout_s = row.timeout_s;
    j.avoid_worker = std::move(row.avoid_worker);
    j.device = std::move(row.device);
    j.priority = row.priority;
    j.campaign = std::move(row.campaign);
    enqueue(std::move(j));
  }
  return leased;
}

// ------------------------------------------------------------------------------------ services

bool JobQueue::valid_service_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxServiceName) return false;
  for (unsigned char c : s)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

Status JobQueue::admit_service(const std::string& name) {
  if (!valid_service_name(name))
    return invalid_argument("service names are 1-64 bytes of letters, digits, '.', '_' and '-'");
  if (services_.count(name) || known_services_.count(name)) return Status::ok();
  if (custom_services() < kMaxServices) return Status::ok();
  drop_idle_services();
  if (custom_services() < kMaxServices || evict_unserved_service(name)) return Status::ok();
  return resource_exhausted("the broker serves at most " + std::to_string(kMaxServices) +
                            " services besides its known ones, and each of them has a worker");
}

size_t JobQueue::custom_services() const {
  size_t n = services_.size();
  for (const auto& known : known_services_) n -= services_.count(known);
  return n;
}

// Forgets a service that is not a known one: its queue and, if it had any, its series.
void JobQueue::drop_service(std::map<std::string, ServiceQueue>::iterator it) {
  const bool served = it->second.served;
  const std::string name = it->first;
  services_.erase(it);
  if (served) metrics_.drop_service(name);
  update_other_gauges();
}

void JobQueue::drop_idle_services() {
  for (auto it = services_.begin(); it != services_.end();) {
    auto next = std::next(it);
    if (!known_services_.count(it->first) && it->second.queued.empty() && it->second.workers.empty()) drop_service(it);
    it = next;
  }
}

// Fails the queued jobs of the service with no worker that has been untouched longest, and drops it.
bool JobQueue::evict_unserved_service(const std::string& for_service) {
  auto victim = services_.end();
  for (auto it = services_.begin(); it != services_.end(); ++it) {
    if (known_services_.count(it->first) || !it->second.workers.empty()) continue;
    if (victim == services_.end() || it->second.touched < victim->second.touched) victim = it;
  }
  if (victim == services_.end()) return false;
  const std::string why = "no worker served '" + victim->first + "'; its queue was dropped to admit another (at most " +
                          std::to_string(kMaxServices) + " services besides the known ones)";
  const std::string label = service_label(victim->first);
  std::vector<std::string> queued = victim->second.queued.take_all();
  for (const auto& id : queued) {
    auto jit = jobs_.find(id);
    if (jit == jobs_.end()) continue;
    LiveJob job = std::move(jit->second);
    jobs_.erase(jit);
    // A failed write leaves the row queued: a restarted broker queues it again.
    store_ok("complete", "failing " + id, table_.complete(id, JobState::kFailed, "", why, {}).status());
    metrics_.job_completed(label, false);
    publish(job, "failed");
  }
  spdlog::warn("service '{}' dropped to admit '{}': {} job(s) queued with no worker failed", victim->first, for_service,
               queued.size());
  drop_service(victim);
  return true;
}

std::string JobQueue::service_label(const std::string& service) const {
  if (known_services_.count(service)) return service;
  auto it = services_.find(service);
  return it != services_.end() && it->second.served ? service : std::string(kOtherServiceLabel);
}

// The gauges of every service that shares kOtherServiceLabel, summed.
void JobQueue::update_other_gauges() {
  int64_t queued = 0;
  for (const auto& [name, q] : services_)
    if (service_label(name) == kOtherServiceLabel) queued += static_cast<int64_t>(q.queued.size());
  metrics_.set_queue_depth(std::string(kOtherServiceLabel), static_cast<double>(queued));
}

void JobQueue::update_gauges(const std::string& service) {
  const std::string label = service_label(service);
  if (label == kOtherServiceLabel) return update_other_gauges();  // nobody serves these: no workers, no leases
  auto& q = services_[service];
  int64_t leased = 0;
  for (const auto& id : q.workers) {
    auto w = workers_.find(id);
    if (w != workers_.end()) leased += static_cast<int64_t>(w->second.leased.size());
  }
  metrics_.set_service_gauges(label, static_cast<double>(q.queued.size()), static_cast<double>(leased),
                              static_cast<double>(q.workers.size()));
}

// ------------------------------------------------------------------------------------ jobs

// The job's own timeout, else its service's lease, else its family's ("propose.external" takes
// "propose"'s), else the default.
double JobQueue::lease_for(const LiveJob& j) const {
  if (j.timeout_s > 0) return j.timeout_s;
  auto it = opt_.lease_timeout_s.find(j.service);
  if (it != opt_.lease_timeout_s.end()) return it->second;
  if (size_t dot = j.service.find('.'); dot != std::string::npos) {
    it = opt_.lease_timeout_s.find(j.service.substr(0, dot));
    if (it != opt_.lease_timeout_s.end()) return it->second;
  }
  auto d = opt_.lease_timeout_s.find("default");
  return d != opt_.lease_timeout_s.end() ? d->second : 60.0;
}

void JobQueue::publish(const LiveJob& job, std::string_view state) {
  if (listener_ != nullptr) listener_->job_state(job.id, job.service, state, job.attempt);
}

void JobQueue::enqueue(LiveJob job) {
  job.enqueued_mono = clock_();
  job.leased = false;
  job.worker.clear();
  ServiceQueue& q = services_[job.service];
  q.queued.push(job.id, job.priority, job.campaign);
  q.touched = ++activity_;
  std::string service = job.service;
  jobs_[job.id] = std::move(job);
  update_gauges(service);
}

void JobQueue::enqueue_row(JobRow r) {
  LiveJob j;
  j.id = std::move(r.id);
  j.service = std::move(r.service);
  j.payload = std::move(r.payload);
  j.attempt = r.attempt;
  j.timeout_s = r.timeout_s;
  j.avoid_worker = std::move(r.avoid_worker);
  j.device = std::move(r.device);
  j.priority = r.priority;
  j.campaign = std::move(r.campaign);
  publish(j, "queued");
  enqueue(std::move(j));
}

// Every job-table write reports here. A failure (full disk, full table) is counted and logged, the first
// one of a run at once and the rest throttled, and marks the table unwritable: new jobs are refused with
// a retryable error until a write succeeds again, which ends the refusals by itself.
bool JobQueue::store_ok(std::string_view op, const std::string& what, const Status& st) {
  if (st.is_ok()) {
    if (!metrics_.set_store_writable(true))
      spdlog::info("job table: writes succeed again ({} {}); taking new jobs", op, what);
    return true;
  }
  metrics_.store_write_failed(op);
  if (metrics_.set_store_writable(false)) {
    spdlog::error("job table: {} failed: {}; refusing new jobs until writes succeed again", what, st.message());
  } else {
    store_log_.error(op, "job table: {} failed: {}", what, st.message());
  }
  return false;
}

Result<bool> JobQueue::submit(JobRow row) {
  // Tried even while the table refuses writes: the first insert that succeeds ends the refusals.
  auto inserted = table_.insert(row);
  if (!store_ok("insert", "insert of job " + row.id, inserted.status())) return inserted.status();
  if (!*inserted) {
    metrics_.duplicate_submit();
    return false;
  }
  enqueue_row(std::move(row));
  return true;
}

void JobQueue::requeue(std::string job_id, const std::string& reason, bool worker_retry) {
  // The id is taken by value: callers pass the id of the very job this moves out of the table.
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  LiveJob job = std::move(it->second);
  jobs_.erase(it);
  if (!job.worker.empty()) {
    auto w = workers_.find(job.worker);
    if (w != workers_.end()) w->second.leased.erase(job_id);
  }
  int next_attempt = job.attempt + 1;
  if (next_attempt > opt_.max_attempts) {
    dead_letter(job, reason, worker_retry);
    return;
  }
  // A failed write leaves the row leased: a restarted broker requeues it, so the in-memory queue goes on.
  store_ok("requeue", "requeue " + job.id, table_.requeue(job.id, next_attempt, reason));
  metrics_.job_requeued(service_label(job.service), reason);
  spdlog::info("job {} requeued (attempt {} of {}): {}", job.id, next_attempt, opt_.max_attempts, reason);
  job.attempt = next_attempt;
  publish(job, "queued");
  enqueue(std::move(job));
}

void JobQueue::dead_letter(const LiveJob& job, const std::string& reason, bool worker_retry) {
  std::vector<proto::FollowUp> next;
  // The scorer is told, so a candidate that kills every worker cannot stall its campaign.
  if (job.service != proto::svc::kScore) {
    proto::DeadLetter dl;
    dl.job_id = job.id;
    dl.service = job.service;
    dl.attempts = job.attempt;
    dl.reason = reason;
    dl.payload = proto::Bytes{job.payload};
    dl.worker_retry = worker_retry;
    next.push_back(proto::FollowUp{std::string(proto::svc::kScore), proto::job_id::dead_letter(job.id),
                                   proto::Bytes{proto::encode(dl)}, 0});
  }
  std::string why = "dead after " + std::to_string(job.attempt) + " attempts: " + reason;
  auto inserted = table_.complete(job.id, JobState::kDead, "", why, next);
  if (!store_ok("complete", "dead-letter " + job.id, inserted.status())) {
    pending_deaths_.push_back(PendingDeath{job, reason, worker_retry});
    return;
  }
  metrics_.job_dead(service_label(job.service), DeadReason::kMaxAttempts);
  spdlog::warn("job {} dead-lettered: {}", job.id, why);
  publish(job, "dead");
  for (auto& r : *inserted) enqueue_row(std::move(r));
  update_gauges(job.service);
}

JobQueue::LeaseEnd JobQueue::end_lease(const std::string& identity, const std::string& job_id, int attempt) {
  auto wit = workers_.find(identity);
  if (wit == workers_.end()) {
    // From a worker we dropped (or a broker restart): its job was requeued already.
    metrics_.late_result();
    return LeaseEnd::kUnknownWorker;
  }
  auto jit = jobs_.find(job_id);
  if (jit == jobs_.end() || jit->second.worker != identity || jit->second.attempt != attempt) {
    metrics_.late_result();
    spdlog::info("late or duplicate result for {} (attempt {}) dropped", job_id, attempt);
    return LeaseEnd::kLate;
  }
  wit->second.leased.erase(job_id);
  metrics_.lease_ended(service_label(jit->second.service), clock_() - jit->second.leased_mono);
  return LeaseEnd::kEnded;
}

bool JobQueue::release(const std::string& identity, const std::string& job_id, const std::string& reason) {
  auto jit = jobs_.find(job_id);
  if (jit == jobs_.end() || !jit->second.leased || jit->second.worker != identity) return false;
  requeue(job_id, reason);
  return true;
}

Status JobQueue::complete(const std::string& job_id, JobState final_state, const std::string& result,
                          const std::string& error, const std::vector<proto::FollowUp>& next) {
  auto jit = jobs_.find(job_id);
  if (jit == jobs_.end()) return not_found("job " + job_id + " is not active");
  auto inserted = table_.complete(job_id, final_state, result, error, next);
  if (!store_ok("complete", "completing " + job_id, inserted.status())) {
    // Could not record it (the disk is full?): the job goes back to the queue, and is run again once the
    // table takes writes again.
    requeue(job_id, "the broker could not record its result: " + inserted.status().message());
    return inserted.status();
  }
  const size_t dups = next.size() - inserted->size();
  if (dups > 0) metrics_.duplicate_followups(static_cast<int64_t>(dups));
  LiveJob job = std::move(jit->second);
  jobs_.erase(jit);
  if (final_state == JobState::kDead) {
    metrics_.job_dead(service_label(job.service), DeadReason::kWorker);
    spdlog::warn("job {} dead-lettered by its worker: {}", job.id, error);
  } else {
    metrics_.job_completed(service_label(job.service), final_state == JobState::kDone);
    if (final_state == JobState::kFailed) spdlog::info("job {} failed: {}", job.id, error);
  }
  publish(job, job_state_name(final_state));
  for (auto& r : *inserted) enqueue_row(std::move(r));
  update_gauges(job.service);
  return Status::ok();
}

// May `w` take `job`? A job that names a device model goes only to workers of that model. A job that
// avoids a worker goes to another worker of its service with the same device model (the one it names, else
// the avoided worker's) when one is connected, busy or not (the job waits for it); else to any worker it
// may take, the avoided one included.
bool JobQueue::may_take(const LiveJob& job, const Worker& w, const ServiceQueue& q) const {
  if (!job.device.empty() && w.caps.gpu_name != job.device) return false;
  if (job.avoid_worker.empty()) return true;
  const Worker* avoided = nullptr;
  for (const auto& id : q.workers) {
    const Worker& o = workers_.at(id);
    if (o.worker_id == job.avoid_worker) avoided = &o;
  }
  auto alternative = [&](const Worker& o) {
    if (o.worker_id == job.avoid_worker) return false;
    if (!job.device.empty()) return o.caps.gpu_name == job.device;
    return avoided == nullptr || o.caps.gpu_name == avoided->caps.gpu_name;
  };
  for (const auto& id : q.workers) {
    if (alternative(workers_.at(id))) return alternative(w);
  }
  return true;
}

void JobQueue::dispatch() {
  for (auto& [service, q] : services_) {
    if (q.queued.empty() || q.workers.empty()) continue;
    bool progress = true;
    while (!q.queued.empty() && progress) {
      progress = false;
      for (size_t k = 0; k < q.workers.size() && !q.queued.empty(); ++k) {
        const std::string identity = q.workers[(q.rr + k) % q.workers.size()];
        Worker& w = workers_.at(identity);
        if (static_cast<int>(w.leased.size()) >= w.slots) continue;
        // The first queued job this worker may take (jobs whose entry is gone are dropped on the way).
        std::optional<std::string> picked = q.queued.take(kDispatchScan, [&](const std::string& id) {
          auto it = jobs_.find(id);
          return it == jobs_.end() || may_take(it->second, w, q);
        });
        if (!picked) continue;
        std::string job_id = std::move(*picked);
        auto jit = jobs_.find(job_id);
        if (jit == jobs_.end()) {
          progress = true;
          continue;
        }
        LiveJob& job = jit->second;
        double now = clock_();
        job.leased = true;
        job.worker = identity;
        job.leased_mono = now;
        double lease = lease_for(job);
        job.lease_deadline = now + lease;
        w.leased.insert(job_id);
        // A failed write leaves the row queued: the lease lives in memory, and a restart requeues it anyway.
        store_ok("lease", "lease of " + job_id, table_.mark_leased(job_id, job.attempt));
        metrics_.job_leased(service_label(service), now - job.enqueued_mono);
        proto::Job msg{job.id, job.attempt, job.service, proto::Bytes{job.payload}, wall_time_s() + lease};
        publish(job, "leased");
        // The delivery may find the worker unreachable and remove it (requeueing this very job): nothing
        // of `job` or `w` is used past it.
        if (listener_ != nullptr) listener_->deliver(identity, msg);
        progress = true;
        if (!workers_.count(identity)) break;
      }
      if (q.workers.empty()) break;
      q.rr = (q.rr + 1) % q.workers.size();
    }
    update_gauges(service);
  }
}

// ------------------------------------------------------------------------------------ workers

Status JobQueue::add_worker(Worker w) {
  if (workers_.count(w.identity)) {
    remove_worker(w.identity, "worker re-registered");
  } else if (workers_.size() >= opt_.max_workers) {
    return resource_exhausted("the broker serves at most " + std::to_string(opt_.max_workers) + " workers at once");
  }
  w.last_seen = clock_();
  const std::string identity = w.identity;
  const std::string service = w.service;
  spdlog::info("worker {} ready for '{}' with {} slot(s){}{}", w.worker_id, w.service, w.slots,
               w.caps.gpu_name.empty() ? "" : " on " + w.caps.gpu_name,
               w.bridge.empty() ? "" : " (external bridge '" + w.bridge + "')");
  workers_[identity] = std::move(w);
  update_shortest_heartbeat();
  ServiceQueue& q = services_[service];
  q.workers.push_back(identity);
  q.touched = ++activity_;
  if (!q.served) {
    q.served = true;
    update_other_gauges();  // its queue has series of its own from now on
  }
  update_gauges(service);
  return Status::ok();
}

void JobQueue::remove_worker(const std::string& identity, const std::string& reason) {
  auto it = workers_.find(identity);
  if (it == workers_.end()) return;
  Worker w = std::move(it->second);
  workers_.erase(it);
  update_shortest_heartbeat();
  auto& q = services_[w.service];
  q.workers.erase(std::remove(q.workers.begin(), q.workers.end(), identity), q.workers.end());
  q.touched = ++activity_;
  spdlog::info("worker {} ({}{}) removed: {}; {} job(s) back to the queue", w.worker_id, w.service,
               w.bridge.empty() ? "" : ", bridge '" + w.bridge + "'", reason, w.leased.size());
  for (const auto& job_id : w.leased) {
    auto j = jobs_.find(job_id);
    if (j != jobs_.end()) j->second.worker.clear();
    requeue(job_id, reason + " (" + w.worker_id + ")");
  }
  if (listener_ != nullptr) listener_->worker_removed(identity);
  update_gauges(w.service);
}

const Worker* JobQueue::worker(const std::string& identity) const {
  auto it = workers_.find(identity);
  return it == workers_.end() ? nullptr : &it->second;
}

std::string JobQueue::next_worker(const std::string& service) {
  auto it = services_.find(service);
  if (it == services_.end() || it->second.workers.empty()) return "";
  ServiceQueue& q = it->second;
  return q.workers[q.rr++ % q.workers.size()];
}

void JobQueue::heard_from(const std::string& identity) {
  auto it = workers_.find(identity);
  if (it != workers_.end()) it->second.last_seen = clock_();
}

void JobQueue::wrote_to(const std::string& identity) {
  auto it = workers_.find(identity);
  if (it != workers_.end()) it->second.last_sent = clock_();
}

// Kept in shortest_heartbeat_s_ for the run loop's tick; recomputed only when a worker comes or goes.
void JobQueue::update_shortest_heartbeat() {
  double s = opt_.heartbeat_interval_s;
  for (const auto& [id, w] : workers_)
    if (w.heartbeat_s > 0) s = std::min(s, w.heartbeat_s);
  shortest_heartbeat_s_ = s;
}

// ------------------------------------------------------------------------------------ timers

void JobQueue::check_timers() {
  const double now = clock_();
  if (!pending_deaths_.empty()) {
    auto retry = std::move(pending_deaths_);
    pending_deaths_.clear();
    for (const auto& d : retry) dead_letter(d.job, d.reason, d.worker_retry);
  }
  std::vector<std::pair<std::string, double>> lost;
  for (auto& [id, w] : workers_) {
    // A worker that beats slower than the broker is judged by its own period.
    double dead_after = std::max(opt_.heartbeat_interval_s, w.heartbeat_s) * opt_.heartbeat_liveness;
    if (now - w.last_seen > dead_after) lost.emplace_back(id, dead_after);
  }
  for (const auto& [id, after] : lost)
    remove_worker(id, "worker lost: silent for " + format_value("%.1f", after) + " s");
  std::vector<std::string> expired, unserved;
  for (auto& [id, j] : jobs_) {
    if (j.leased && now > j.lease_deadline) expired.push_back(id);
    if (!j.leased && waited_too_long(j, now)) unserved.push_back(id);
  }
  for (const auto& id : expired) requeue(id, "deadline passed");
  for (const auto& id : unserved) fail_unserved_device(id);
}

bool JobQueue::device_served(const LiveJob& job) const {
  auto q = services_.find(job.service);
  if (q == services_.end()) return false;
  return std::any_of(q->second.workers.begin(), q->second.workers.end(),
                     [&](const std::string& id) { return workers_.at(id).caps.gpu_name == job.device; });
}

// Whether a queued job that needs a device model has waited device_wait_s with no worker of that model
// serving its service; the wait starts over whenever one is connected.
bool JobQueue::waited_too_long(LiveJob& job, double now) {
  if (job.device.empty()) return false;
  if (device_served(job)) {
    job.no_device_since = 0;
    return false;
  }
  if (job.no_device_since == 0) {
    job.no_device_since = now;
    spdlog::info("job {} waits for a worker of '{}' on '{}': none is connected", job.id, job.service, job.device);
    return false;
  }
  return opt_.device_wait_s > 0 && now - job.no_device_since >= opt_.device_wait_s;
}

// Not the candidate's fault: the dead letter says the job was not run (worker_retry), and why.
void JobQueue::fail_unserved_device(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  LiveJob job = std::move(it->second);
  jobs_.erase(it);
  auto q = services_.find(job.service);
  if (q != services_.end()) q->second.queued.remove(job.id, job.priority, job.campaign);
  dead_letter(job,
              "no worker of '" + job.service + "' on '" + job.device + "' was connected for " +
                  format_value("%.0f", opt_.device_wait_s) + " s (it must run on the device model it names)",
              true);
}

std::vector<std::string> JobQueue::heartbeats_due() const {
  const double now = clock_();
  std::vector<std::string> due;
  for (const auto& [id, w] : workers_) {
    // ... and one that expects beats more often than the broker's period gets them that often.
    double every = w.heartbeat_s > 0 ? std::min(opt_.heartbeat_interval_s, w.heartbeat_s) : opt_.heartbeat_interval_s;
    if (now - w.last_sent >= every) due.push_back(id);
  }
  return due;
}

}  // namespace kiln::broker
