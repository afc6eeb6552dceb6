#include "kiln/broker/broker.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <set>
#include <unordered_map>
#include <vector>

#include "kiln/broker/allowlist.h"
#include "kiln/broker/job_table.h"
#include "kiln/core/strings.h"
#include "kiln/core/time.h"
#include "kiln/messaging/curve.h"
#include "kiln/messaging/frames.h"
#include "kiln/metrics/metrics.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"

namespace kiln::broker {

namespace {

using messaging::Envelope;
using messaging::printable_identity;

// Peers are keyed by a tag byte + their routing id, so the routing ids of the two ROUTER sockets (each
// generates its own) can never collide in the tables below.
constexpr char kInternalTag = 'i';
constexpr char kExternalTag = 'e';

bool is_external(const std::string& peer) { return !peer.empty() && peer[0] == kExternalTag; }

std::string printable_peer(const std::string& peer) {
  if (peer.empty()) return "?";
  return (is_external(peer) ? "bridge peer " : "") + printable_identity(std::string_view(peer).substr(1));
}

// ZAP (RFC 27) status codes.
constexpr std::string_view kZapOk = "200";
constexpr std::string_view kZapDenied = "400";
constexpr std::string_view kZapError = "500";
constexpr size_t kZapMaxFrames = 16;
constexpr double kDeniedLogInterval_s = 10;  // a refused bridge retries every second: log it less often
constexpr size_t kDeniedLogMaxKeys = 1024;

// Service names become metric label values and table rows: 1-64 bytes of [A-Za-z0-9._-], and at most
// kMaxServices distinct ones besides the known ones (Kiln's own and those the config names), so a peer
// cannot make /metrics unparseable or grow it without bound, nor crowd out the services Kiln runs on.
constexpr size_t kMaxServiceName = 64;
constexpr size_t kMaxServices = 256;
// The per-service label of every service that is not known and has never had a worker: jobs submitted
// to names nobody serves share one series. '~' is outside the service-name charset: no collision.
constexpr std::string_view kOtherServiceLabel = "~other";
constexpr std::string_view kKnownServices[] = {proto::svc::kPropose, proto::svc::kProposeExternal, proto::svc::kCompile,
                                               proto::svc::kTestCpu, proto::svc::kTestCuda,        proto::svc::kScore,
                                               proto::svc::kPromote, proto::svc::kIngest};

bool valid_service_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxServiceName) return false;
  for (unsigned char c : s)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

// Worker ids appear in logs and status replies: printable ASCII, bounded.
constexpr size_t kMaxWorkerId = 128;

bool valid_worker_id(std::string_view s) {
  if (s.empty() || s.size() > kMaxWorkerId) return false;
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

// The broker's sockets take frames up to this many times max_message_bytes, so a frame somewhat over the
// limit is read, counted and answered rather than silently dropped with its connection by ZeroMQ.
constexpr int64_t kTransportSlack = 2;

// Why a message was rejected: the label of kiln_broker_rejected_frames_total, a fixed set whatever the
// message said (each series exists from the start, at 0).
enum class Rejection {
  kMalformed,         // frame count, protocol tag or command
  kOversized,         // a body over max_message_bytes
  kInvalidName,       // a service name (or worker id) outside the allowed length and charset
  kTooManyServices,   // a new service past kMaxServices
  kTooManyWorkers,    // a READY past max_workers
  kBadReady,
  kBadResult,
  kBadSubmit,
  kBadRequest,
  kBadReply,
  kForbidden,         // a bridge doing what bridges may not
  kRevoked,           // a bridge no longer on the allowlist
  kStoreUnavailable,  // a SUBMIT refused because the job table cannot take writes
};
constexpr Rejection kAllRejections[] = {
    Rejection::kMalformed, Rejection::kOversized, Rejection::kInvalidName, Rejection::kTooManyServices,
    Rejection::kTooManyWorkers, Rejection::kBadReady, Rejection::kBadResult, Rejection::kBadSubmit,
    Rejection::kBadRequest, Rejection::kBadReply, Rejection::kForbidden, Rejection::kRevoked,
    Rejection::kStoreUnavailable};

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

// The job-table writes, the label of kiln_broker_store_write_failures_total.
constexpr std::string_view kStoreOps[] = {"insert", "lease", "requeue", "complete"};

struct LiveJob {
  std::string id;
  std::string service;
  std::string payload;
  int attempt = 1;
  double timeout_s = 0;
  bool leased = false;
  std::string worker;          // identity holding the lease
  double lease_deadline = 0;   // monotonic
  double enqueued_mono = 0;
  double leased_mono = 0;
  std::string avoid_worker;  // a worker id not to lease it to while the service has another worker
};

struct WorkerRec {
  std::string identity;
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

struct PendingRequest {
  std::string client;            // identity
  std::string client_request_id;
  std::string worker;            // identity answering
  double deadline = 0;           // monotonic
};

struct ServiceQueue {
  std::deque<std::string> queued;  // job ids, FIFO
  std::vector<std::string> workers;
  size_t rr = 0;
  bool served = false;  // a worker has registered for it: it has series of its own from then on
};

}  // namespace

struct Broker::Impl {
  zmq::context_t& ctx;
  BrokerOptions opt;
  JobTable table;
  std::unique_ptr<zmq::socket_t> router;
  std::unique_ptr<zmq::socket_t> pub;
  std::unique_ptr<zmq::socket_t> external;  // CURVE ROUTER for external bridges
  std::unique_ptr<zmq::socket_t> zap;       // REP on inproc://zeromq.zap.01: admits allowlisted keys
  // PAIR sockets receiving the ROUTERs' disconnect events (declared after them: closed first).
  std::unique_ptr<zmq::socket_t> router_monitor;
  std::unique_ptr<zmq::socket_t> external_monitor;
  std::string endpoint;
  std::string events_endpoint;
  std::string external_endpoint;
  Allowlist allowlist;
  struct stat allowlist_stat {};
  bool allowlist_exists = false;
  std::map<std::string, double> denied_logged;  // raw key -> when last logged
  log::ThrottledLog reject_log{"rejected messages", opt.log_limits, monotonic_s};
  log::ThrottledLog store_log{"job-table errors", opt.log_limits, monotonic_s};
  BrokerCounters counters;
  uint64_t event_seq = 0;
  uint64_t next_forward_id = 1;

  std::unordered_map<std::string, LiveJob> jobs;  // queued and leased only
  std::map<std::string, ServiceQueue> services;
  std::set<std::string, std::less<>> known_services;  // always admitted, never counted against kMaxServices
  std::unordered_map<std::string, WorkerRec> workers;  // by identity
  double shortest_heartbeat_s = 0;                     // update_shortest_heartbeat(); set in the constructor
  std::unordered_map<std::string, PendingRequest> requests;  // by forwarded request id
  // Jobs to dead-letter whose record could not be written (the table refused writes): retried on every
  // timer tick, so none is lost from memory or leased again past max_attempts.
  struct PendingDeath {
    LiveJob job;
    std::string reason;
    bool worker_retry = false;
  };
  std::vector<PendingDeath> pending_deaths;

  // Metrics (DESIGN §8).
  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Gauge>* queue_depth;
  prometheus::Family<prometheus::Gauge>* jobs_leased;
  prometheus::Family<prometheus::Gauge>* workers_connected;
  prometheus::Family<prometheus::Counter>* completed_total;
  prometheus::Family<prometheus::Counter>* requeued_total;
  prometheus::Family<prometheus::Counter>* dead_total;
  prometheus::Family<prometheus::Counter>* rejected_total;
  prometheus::Family<prometheus::Counter>* store_failures_total;
  prometheus::Gauge* store_writable;
  prometheus::Family<prometheus::Counter>* disconnects_total;
  prometheus::Family<prometheus::Counter>* duplicates_total;
  prometheus::Family<prometheus::Histogram>* duration;
  prometheus::Family<prometheus::Histogram>* queue_wait;
  prometheus::Family<prometheus::Counter>* bridge_messages;
  prometheus::Counter* bridge_auth_failures;
  prometheus::Gauge* bridge_keys;

  Impl(zmq::context_t& c, BrokerOptions o, JobTable t, std::shared_ptr<prometheus::Registry> r)
      : ctx(c), opt(std::move(o)), table(std::move(t)), registry(std::move(r)) {
    using namespace prometheus;
    queue_depth = &BuildGauge().Name("kiln_queue_depth_jobs").Help("Jobs waiting for a worker, per service").Register(*registry);
    jobs_leased = &BuildGauge().Name("kiln_jobs_leased").Help("Jobs leased to a worker, per service").Register(*registry);
    workers_connected = &BuildGauge().Name("kiln_workers_connected").Help("Workers connected, per service").Register(*registry);
    completed_total = &BuildCounter().Name("kiln_jobs_completed_total").Help("Jobs finished, by outcome").Register(*registry);
    requeued_total = &BuildCounter().Name("kiln_jobs_requeued_total").Help("Jobs put back in the queue, by reason").Register(*registry);
    dead_total = &BuildCounter().Name("kiln_jobs_dead_total").Help("Jobs dead-lettered after max attempts").Register(*registry);
    rejected_total = &BuildCounter().Name("kiln_broker_rejected_frames_total").Help("Malformed or unexpected messages rejected, by reason").Register(*registry);
    for (Rejection why : kAllRejections) rejected_total->Add({{"reason", std::string(rejection_label(why))}});
    store_failures_total = &BuildCounter().Name("kiln_broker_store_write_failures_total").Help("Job-table writes that failed (disk or table full), by operation").Register(*registry);
    for (std::string_view op : kStoreOps) store_failures_total->Add({{"op", std::string(op)}});
    store_writable = &BuildGauge().Name("kiln_broker_store_writable").Help("1 while the job table takes writes; 0 from a failed write until one succeeds (new jobs are refused meanwhile)").Register(*registry).Add({});
    store_writable->Set(1);
    update_shortest_heartbeat();
    for (std::string_view s : kKnownServices) known_services.emplace(s);
    for (const auto& [s, _] : opt.lease_timeout_s)
      if (s != "default" && valid_service_name(s)) known_services.insert(s);
    for (const auto* list : {&opt.external_services, &opt.external_followups})
      for (const auto& s : *list)
        if (valid_service_name(s)) known_services.insert(s);
    disconnects_total = &BuildCounter().Name("kiln_broker_disconnects_total").Help("Connections closed, by endpoint: peers leaving, and peers ZeroMQ dropped for a frame over max_message_bytes").Register(*registry);
    duplicates_total = &BuildCounter().Name("kiln_broker_duplicates_total").Help("Duplicate submits, follow-ups and late results dropped").Register(*registry);
    duration = &BuildHistogram().Name("kiln_job_duration_seconds").Help("Lease to result, per service").Register(*registry);
    queue_wait = &BuildHistogram().Name("kiln_job_queue_wait_seconds").Help("Enqueue to lease, per service").Register(*registry);
    bridge_messages = &BuildCounter().Name("kiln_bridge_messages_total").Help("Messages received from external bridges, per bridge").Register(*registry);
    bridge_auth_failures = &BuildCounter().Name("kiln_bridge_auth_failures_total").Help("CURVE clients refused by the allowlist").Register(*registry).Add({});
    bridge_keys = &BuildGauge().Name("kiln_bridge_allowlist_keys").Help("Keys on the external bridges' allowlist").Register(*registry).Add({});
  }

  // The job's own timeout, else its service's lease, else its family's ("propose.external" takes
  // "propose"'s), else the default.
  double lease_for(const LiveJob& j) const {
    if (j.timeout_s > 0) return j.timeout_s;
    auto it = opt.lease_timeout_s.find(j.service);
    if (it != opt.lease_timeout_s.end()) return it->second;
    if (size_t dot = j.service.find('.'); dot != std::string::npos) {
      it = opt.lease_timeout_s.find(j.service.substr(0, dot));
      if (it != opt.lease_timeout_s.end()) return it->second;
    }
    auto d = opt.lease_timeout_s.find("default");
    return d != opt.lease_timeout_s.end() ? d->second : 60.0;
  }

  // The label a service's series carry: its name when it is known or has had a worker, else the shared one.
  std::string service_label(const std::string& service) const {
    if (known_services.count(service)) return service;
    auto it = services.find(service);
    return it != services.end() && it->second.served ? service : std::string(kOtherServiceLabel);
  }

  // The gauges of every service that shares kOtherServiceLabel, summed.
  void update_other_gauges() {
    int64_t queued = 0;
    for (const auto& [name, q] : services)
      if (service_label(name) == kOtherServiceLabel) queued += static_cast<int64_t>(q.queued.size());
    queue_depth->Add({{"service", std::string(kOtherServiceLabel)}}).Set(static_cast<double>(queued));
  }

  void update_gauges(const std::string& service) {
    const std::string label = service_label(service);
    if (label == kOtherServiceLabel) return update_other_gauges();  // nobody serves these: no workers, no leases
    auto& q = services[service];
    int64_t leased = 0;
    for (const auto& w : q.workers) leased += static_cast<int64_t>(workers[w].leased.size());
    queue_depth->Add({{"service", label}}).Set(static_cast<double>(q.queued.size()));
    jobs_leased->Add({{"service", label}}).Set(static_cast<double>(leased));
    workers_connected->Add({{"service", label}}).Set(static_cast<double>(q.workers.size()));
  }

  void reject(const std::string& peer, Rejection reason, const std::string& why) {
    counters.rejected_frames++;
    const std::string_view label = rejection_label(reason);
    rejected_total->Add({{"reason", std::string(label)}}).Increment();
    reject_log.warn(label, "rejected message from {} ({}): {}", printable_peer(peer), label, why);
  }

  // A new service name must be valid, and there may be only so many.
  Status admit_service(const std::string& name) const {
    if (!valid_service_name(name))
      return invalid_argument("service names are 1-64 bytes of letters, digits, '.', '_' and '-'");
    if (services.count(name) || known_services.count(name)) return Status::ok();
    size_t custom = services.size();
    for (const auto& known : known_services) custom -= services.count(known);
    if (custom >= kMaxServices)
      return resource_exhausted("the broker serves at most " + std::to_string(kMaxServices) +
                                " services besides its known ones");
    return Status::ok();
  }
  static Rejection rejection_for_service(const Status& st) {
    return st.code() == StatusCode::kResourceExhausted ? Rejection::kTooManyServices : Rejection::kInvalidName;
  }

  // Every job-table write reports here. A failure (full disk, full table) is counted and logged, the
  // first one of a run at once and the rest throttled, and marks the table unwritable: new jobs are
  // refused with a retryable error until a write succeeds again, which ends the refusals by itself.
  bool store_ok(std::string_view op, const std::string& what, const Status& st) {
    if (st.is_ok()) {
      if (!counters.store_writable.exchange(true)) {
        store_writable->Set(1);
        spdlog::info("job table: writes succeed again ({} {}); taking new jobs", op, what);
      }
      return true;
    }
    counters.store_write_failures++;
    store_failures_total->Add({{"op", std::string(op)}}).Increment();
    if (counters.store_writable.exchange(false)) {
      store_writable->Set(0);
      spdlog::error("job table: {} failed: {}; refusing new jobs until writes succeed again", what, st.message());
    } else {
      store_log.error(op, "job table: {} failed: {}", what, st.message());
    }
    return false;
  }

  void publish(const std::string& job_id, const std::string& service, std::string_view state, int attempt) {
    if (!pub) return;
    proto::JobStatus ev;
    ev.job_id = job_id;
    ev.service = service;
    ev.state = std::string(state);
    ev.attempt = attempt;
    std::string topic = "job." + std::string(state);
    std::string seq = std::to_string(++event_seq);
    try {
      pub->send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      pub->send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      pub->send(zmq::buffer(proto::encode(ev)), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // Events are best effort: nothing that must not be lost rides on them.
    }
  }

  Status send_raw(const std::string& peer, std::string_view command, const std::string& body) {
    zmq::socket_t* socket = is_external(peer) ? external.get() : router.get();
    if (socket == nullptr || peer.size() < 2) return unavailable("no socket for peer");
    return messaging::send_envelope(*socket, std::string_view(peer).substr(1), command, body);
  }

  void send_to(const std::string& identity, std::string_view command, const std::string& body) {
    Status st = send_raw(identity, command, body);
    if (!st.is_ok()) {
      spdlog::debug("send {} to {} failed: {}", command, printable_peer(identity), st.message());
      auto it = workers.find(identity);
      if (it != workers.end()) drop_worker(identity, "unreachable");
      return;
    }
    auto it = workers.find(identity);
    if (it != workers.end()) it->second.last_sent = monotonic_s();
  }

  void enqueue(LiveJob job) {
    job.enqueued_mono = monotonic_s();
    job.leased = false;
    job.worker.clear();
    services[job.service].queued.push_back(job.id);
    std::string service = job.service;
    jobs[job.id] = std::move(job);
    update_gauges(service);
  }

  // A job that came back (worker died, deadline passed, worker said retry): attempt+1 or dead.
  // `worker_retry`: the worker itself gave it back, naming a fault of its own side in `reason`. The id is
  // taken by value: callers pass the id of the very job this moves out of the table.
  void requeue_or_kill(std::string job_id, const std::string& reason, bool worker_retry = false) {
    auto it = jobs.find(job_id);
    if (it == jobs.end()) return;
    LiveJob job = std::move(it->second);
    jobs.erase(it);
    if (!job.worker.empty()) {
      auto w = workers.find(job.worker);
      if (w != workers.end()) w->second.leased.erase(job_id);
    }
    int next_attempt = job.attempt + 1;
    if (next_attempt > opt.max_attempts) {
      kill(job, reason, worker_retry);
      return;
    }
    // A failed write leaves the row leased: a restarted broker requeues it, so the in-memory queue goes on.
    store_ok("requeue", "requeue " + job.id, table.requeue(job.id, next_attempt, reason));
    counters.requeued++;
    requeued_total->Add({{"service", service_label(job.service)}, {"reason", reason_label(reason)}}).Increment();
    spdlog::info("job {} requeued (attempt {} of {}): {}", job.id, next_attempt, opt.max_attempts, reason);
    job.attempt = next_attempt;
    publish(job.id, job.service, "queued", job.attempt);
    enqueue(std::move(job));
  }

  static std::string reason_label(const std::string& reason) {
    if (reason.rfind("worker lost", 0) == 0) return "worker_lost";
    if (reason.rfind("deadline", 0) == 0) return "deadline";
    if (reason.rfind("worker disconnected", 0) == 0) return "worker_disconnected";
    if (reason.rfind("unreachable", 0) == 0) return "unreachable";
    if (reason.rfind("result refused", 0) == 0) return "result_refused";
    if (reason.rfind("the broker could not record", 0) == 0) return "store_unavailable";
    return "retry";
  }

  void kill(const LiveJob& job, const std::string& reason, bool worker_retry) {
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
      next.push_back(proto::FollowUp{std::string(proto::svc::kScore), "dead:" + job.id, proto::Bytes{proto::encode(dl)}, 0});
    }
    std::string why = "dead after " + std::to_string(job.attempt) + " attempts: " + reason;
    auto inserted = table.complete(job.id, JobState::kDead, "", why, next);
    if (!store_ok("complete", "dead-letter " + job.id, inserted.status())) {
      pending_deaths.push_back(PendingDeath{job, reason, worker_retry});
      return;
    }
    counters.dead++;
    dead_total->Add({{"service", service_label(job.service)}}).Increment();
    spdlog::warn("job {} dead-lettered: {}", job.id, why);
    publish(job.id, job.service, "dead", job.attempt);
    for (auto& r : *inserted) enqueue_row(std::move(r));
    update_gauges(job.service);
  }

  void enqueue_row(JobRow r) {
    LiveJob j;
    j.id = std::move(r.id);
    j.service = std::move(r.service);
    j.payload = std::move(r.payload);
    j.attempt = r.attempt;
    j.timeout_s = r.timeout_s;
    j.avoid_worker = std::move(r.avoid_worker);
    publish(j.id, j.service, "queued", j.attempt);
    enqueue(std::move(j));
  }

  void drop_worker(const std::string& identity, const std::string& reason) {
    auto it = workers.find(identity);
    if (it == workers.end()) return;
    WorkerRec w = std::move(it->second);
    workers.erase(it);
    update_shortest_heartbeat();
    auto& q = services[w.service];
    q.workers.erase(std::remove(q.workers.begin(), q.workers.end(), identity), q.workers.end());
    spdlog::info("worker {} ({}{}) removed: {}; {} job(s) back to the queue", w.worker_id, w.service,
                 w.bridge.empty() ? "" : ", bridge '" + w.bridge + "'", reason, w.leased.size());
    for (const auto& job_id : w.leased) {
      auto j = jobs.find(job_id);
      if (j != jobs.end()) j->second.worker.clear();
      requeue_or_kill(job_id, reason + " (" + w.worker_id + ")");
    }
    // Forwarded requests that this worker will never answer.
    for (auto r = requests.begin(); r != requests.end();) {
      if (r->second.worker == identity) {
        reply_error(r->second.client, r->second.client_request_id, "worker for the request went away");
        r = requests.erase(r);
      } else {
        ++r;
      }
    }
    update_gauges(w.service);
  }

  Status open_external();

  // ZeroMQ drops, without telling the application, a peer whose frame exceeds ZMQ_MAXMSGSIZE; the
  // monitor's disconnect events are where that shows (with every other closed connection).
  std::unique_ptr<zmq::socket_t> monitor(zmq::socket_t& socket, const char* name) {
    const std::string address =
        "inproc://kiln-broker-" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" + name;
    if (zmq_socket_monitor(static_cast<void*>(socket), address.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) {
      spdlog::warn("broker: no disconnect events for the {} endpoint: {}", name, zmq_strerror(zmq_errno()));
      return nullptr;
    }
    auto pair = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pair);
    pair->set(zmq::sockopt::linger, 0);
    pair->connect(address);
    return pair;
  }

  void drain_monitor(zmq::socket_t* pair, const char* endpoint_label) {
    if (pair == nullptr) return;
    for (int i = 0; i < 1000; ++i) {
      zmq::message_t event, address;
      try {
        if (!pair->recv(event, zmq::recv_flags::dontwait)) return;
        if (event.more()) (void)pair->recv(address, zmq::recv_flags::none);
      } catch (const zmq::error_t&) {
        return;
      }
      disconnects_total->Add({{"endpoint", endpoint_label}}).Increment();
    }
  }

  void reply_error(const std::string& client, const std::string& request_id, const std::string& error) {
    proto::Reply rep;
    rep.request_id = request_id;
    rep.ok = false;
    rep.error = error;
    send_to(client, proto::cmd::kReply, proto::encode(rep));
  }

  // ------------------------------------------------------------------------------------ commands

  // A READY that is refused is answered with an ACK that says why (a worker that misnamed its service
  // learns it); the peer stays unregistered.
  void refuse_ready(const std::string& peer, Rejection reason, const std::string& why) {
    reject(peer, reason, "bad READY: " + why);
    proto::Ack ack;
    ack.error = "READY refused: " + why;
    send_to(peer, proto::cmd::kAck, proto::encode(ack));
  }

  // Tells a worker that its RESULT for `job_id` was refused and why; the job has been released already.
  void tell_result_refused(const std::string& peer, const std::string& job_id, const std::string& why) {
    counters.refused_results++;
    proto::Ack ack;
    ack.job_id = job_id;
    ack.error = "RESULT refused: " + why + " (the job was released)";
    send_to(peer, proto::cmd::kAck, proto::encode(ack));
  }

  void on_ready(const Envelope& env) {
    auto ready = proto::decode<proto::Ready>(env.body);
    if (!ready.is_ok()) return reject(env.identity, Rejection::kBadReady, "bad READY: " + ready.status().message());
    if (ready->slots < 1 || ready->slots > 1024)
      return reject(env.identity, Rejection::kBadReady, "bad READY: slots out of range (1-1024)");
    if (Status st = admit_service(ready->service); !st.is_ok())
      return refuse_ready(env.identity, rejection_for_service(st), st.message());
    if (!valid_worker_id(ready->worker_id))
      return refuse_ready(env.identity, Rejection::kInvalidName, "worker ids are 1-128 bytes of printable ASCII");
    if (is_external(env.identity) &&
        std::find(opt.external_services.begin(), opt.external_services.end(), ready->service) == opt.external_services.end())
      return reject(env.identity, Rejection::kForbidden,
                    "bad READY: bridge '" + env.user_id + "' may not serve '" + ready->service + "'");
    if (workers.count(env.identity)) {
      drop_worker(env.identity, "worker re-registered");
    } else if (workers.size() >= opt.max_workers) {
      return refuse_ready(env.identity, Rejection::kTooManyWorkers,
                          "the broker serves at most " + std::to_string(opt.max_workers) + " workers at once");
    }
    WorkerRec w;
    w.identity = env.identity;
    w.service = ready->service;
    w.worker_id = ready->worker_id;
    w.bridge = is_external(env.identity) ? env.user_id : std::string();
    w.slots = ready->slots;
    w.caps = ready->caps;
    // Bounded, so a READY cannot make a worker unkillable or ask for a flood of heartbeats.
    if (std::isfinite(ready->heartbeat_interval_s) && ready->heartbeat_interval_s > 0)
      w.heartbeat_s = std::clamp(ready->heartbeat_interval_s, 0.01, 60.0);
    w.last_seen = monotonic_s();
    workers[env.identity] = w;
    update_shortest_heartbeat();
    ServiceQueue& q = services[w.service];
    q.workers.push_back(env.identity);
    if (!q.served) {
      q.served = true;
      update_other_gauges();  // its queue has series of its own from now on
    }
    spdlog::info("worker {} ready for '{}' with {} slot(s){}{}", w.worker_id, w.service, w.slots,
                 w.caps.gpu_name.empty() ? "" : " on " + w.caps.gpu_name,
                 w.bridge.empty() ? "" : " (external bridge '" + w.bridge + "')");
    update_gauges(w.service);
  }

  void on_result(const Envelope& env) {
    auto res = proto::decode<proto::ResultMsg>(env.body);
    if (!res.is_ok()) {
      reject(env.identity, Rejection::kBadResult, "bad RESULT: " + res.status().message());
      // When it still names a job leased to this peer, that job is released now, not when its lease ends.
      auto job_id = proto::peek_string(env.body, "job_id");
      if (!job_id.is_ok()) return;
      auto jit = jobs.find(*job_id);
      if (jit == jobs.end() || !jit->second.leased || jit->second.worker != env.identity) return;
      requeue_or_kill(*job_id, "result refused: " + res.status().message());
      return tell_result_refused(env.identity, *job_id, res.status().message());
    }
    auto wit = workers.find(env.identity);
    if (wit == workers.end()) {
      // From a worker we dropped (or a broker restart): its job was requeued; tell it to re-register.
      counters.late_results++;
      duplicates_total->Add({{"kind", "late_result"}}).Increment();
      send_to(env.identity, proto::cmd::kDisconnect, proto::encode(proto::Disconnect{"unknown worker"}));
      return;
    }
    auto jit = jobs.find(res->job_id);
    if (jit == jobs.end() || jit->second.worker != env.identity || jit->second.attempt != res->attempt) {
      counters.late_results++;
      duplicates_total->Add({{"kind", "late_result"}}).Increment();
      spdlog::info("late or duplicate result for {} (attempt {}) dropped", res->job_id, res->attempt);
      return;
    }
    LiveJob& job = jit->second;
    wit->second.leased.erase(job.id);
    double now = monotonic_s();
    duration->Add({{"service", service_label(job.service)}}, metrics::duration_buckets_s()).Observe(now - job.leased_mono);

    if (res->outcome == proto::outcome::kRetry) {
      requeue_or_kill(job.id, "worker asked to retry: " + res->error, /*worker_retry=*/true);
      return;
    }
    JobState final_state = res->outcome == proto::outcome::kOk ? JobState::kDone : JobState::kFailed;
    // A result that cannot be recorded as sent is refused, and its job goes back to the queue at once
    // (attempt + 1) for a better-behaved worker: the lease it held is over.
    auto refuse = [&](Rejection reason, const std::string& why) {
      const std::string job_id = job.id;
      reject(env.identity, reason, "bad RESULT for " + job_id + ": " + why);
      requeue_or_kill(job_id, "result refused: " + why);
      tell_result_refused(env.identity, job_id, why);
    };
    if (res->outcome != proto::outcome::kOk && res->outcome != proto::outcome::kFailed)
      return refuse(Rejection::kBadResult, "outcome must be ok, failed or retry");
    for (const auto& f : res->next) {
      if (f.job_id.empty() || f.job_id.size() > 512) return refuse(Rejection::kBadResult, "follow-up job id empty or over 512 bytes");
      if (Status st = admit_service(f.service); !st.is_ok()) return refuse(rejection_for_service(st), "follow-up: " + st.message());
      if (is_external(env.identity)) {
        Status st = check_bridge_followup(f);
        if (!st.is_ok()) return refuse(Rejection::kForbidden, "bridge '" + wit->second.bridge + "': " + st.message());
      }
    }
    auto inserted = table.complete(job.id, final_state, res->payload.data, res->error, res->next);
    if (!store_ok("complete", "completing " + job.id, inserted.status())) {
      // Could not record it (the disk is full?): the job goes back to the queue, and is run again once
      // the table takes writes again.
      requeue_or_kill(job.id, "the broker could not record its result: " + inserted.status().message());
      return;
    }
    size_t dups = res->next.size() - inserted->size();
    if (dups > 0) {
      counters.duplicate_followups += static_cast<int64_t>(dups);
      duplicates_total->Add({{"kind", "followup"}}).Increment(static_cast<double>(dups));
    }
    counters.completed++;
    completed_total->Add({{"service", service_label(job.service)}, {"outcome", std::string(job_state_name(final_state) == "done" ? "ok" : "failed")}})
        .Increment();
    if (final_state == JobState::kFailed) spdlog::info("job {} failed: {}", job.id, res->error);
    std::string service = job.service;
    publish(job.id, service, job_state_name(final_state), job.attempt);
    jobs.erase(jit);
    for (auto& r : *inserted) enqueue_row(std::move(r));
    update_gauges(service);
  }

  // A bridge is trusted to propose code, nothing more: its results may only lead to the services listed
  // (compile its candidate; tell the scorer a proposal failed), never e.g. straight to "promote".
  Status check_bridge_followup(const proto::FollowUp& f) const {
    if (std::find(opt.external_followups.begin(), opt.external_followups.end(), f.service) == opt.external_followups.end())
      return permission_denied("follow-up to '" + f.service + "' is not open to bridges");
    if (f.service == proto::svc::kScore) {
      auto kind = proto::peek_string(f.payload.data, "kind");
      if (!kind.is_ok() || *kind != proto::kind::kResult)
        return permission_denied("a follow-up to 'score' from a bridge must be a result");
    }
    return Status::ok();
  }

  void on_submit(const Envelope& env) {
    auto sub = proto::decode<proto::Submit>(env.body);
    proto::Ack ack;
    if (!sub.is_ok()) {
      reject(env.identity, Rejection::kBadSubmit, "bad SUBMIT: " + sub.status().message());
      ack.error = sub.status().message();
      return send_to(env.identity, proto::cmd::kAck, proto::encode(ack));
    }
    ack.job_id = sub->job_id;
    if (sub->job_id.empty() || sub->job_id.size() > 512) {
      ack.error = "the job id must be 1-512 bytes";
      reject(env.identity, Rejection::kBadSubmit, "bad SUBMIT: " + ack.error);
      return send_to(env.identity, proto::cmd::kAck, proto::encode(ack));
    }
    if (Status st = admit_service(sub->service); !st.is_ok()) {
      ack.error = st.message();
      reject(env.identity, rejection_for_service(st), "bad SUBMIT: " + ack.error);
      return send_to(env.identity, proto::cmd::kAck, proto::encode(ack));
    }
    JobRow row;
    row.id = sub->job_id;
    row.service = sub->service;
    row.payload = std::move(sub->payload.data);
    row.timeout_s = sub->timeout_s;
    // Tried even while the table refuses writes: the first insert that succeeds ends the refusals.
    auto inserted = table.insert(row);
    if (!store_ok("insert", "insert of job " + row.id, inserted.status())) {
      ack.error = "the broker cannot write its job table (" + inserted.status().message() + "); retry later";
      ack.retryable = true;
      reject(env.identity, Rejection::kStoreUnavailable, "SUBMIT of " + row.id + " refused: " + ack.error);
      return send_to(env.identity, proto::cmd::kAck, proto::encode(ack));
    }
    ack.accepted = true;
    if (!*inserted) {
      ack.duplicate = true;
      counters.duplicate_submits++;
      duplicates_total->Add({{"kind", "submit"}}).Increment();
    } else {
      enqueue_row(std::move(row));
    }
    send_to(env.identity, proto::cmd::kAck, proto::encode(ack));
  }

  void on_request(const Envelope& env) {
    auto req = proto::decode<proto::Request>(env.body);
    if (!req.is_ok()) return reject(env.identity, Rejection::kBadRequest, "bad REQUEST: " + req.status().message());
    if (req->service == proto::svc::kBroker) return answer_broker_query(env.identity, *req);
    if (!valid_service_name(req->service)) {
      reject(env.identity, Rejection::kInvalidName, "bad REQUEST: not a service name");
      return reply_error(env.identity, req->request_id,
                         "service names are 1-64 bytes of letters, digits, '.', '_' and '-'");
    }
    auto qit = services.find(req->service);  // a lookup: a request names no new service
    if (qit == services.end() || qit->second.workers.empty()) {
      return reply_error(env.identity, req->request_id, "no worker connected for service '" + req->service + "'");
    }
    auto& q = qit->second;
    const std::string& worker = q.workers[q.rr++ % q.workers.size()];
    std::string fwd_id = "f" + std::to_string(next_forward_id++);
    double timeout = std::clamp(req->timeout_s, 0.1, 120.0);
    requests[fwd_id] = PendingRequest{env.identity, req->request_id, worker, monotonic_s() + timeout};
    proto::Request fwd = *req;
    fwd.request_id = fwd_id;
    send_to(worker, proto::cmd::kRequest, proto::encode(fwd));
  }

  void on_reply(const Envelope& env) {
    auto rep = proto::decode<proto::Reply>(env.body);
    if (!rep.is_ok()) return reject(env.identity, Rejection::kBadReply, "bad REPLY: " + rep.status().message());
    auto it = requests.find(rep->request_id);
    if (it == requests.end()) return;  // timed out already
    proto::Reply out = *rep;
    out.request_id = it->second.client_request_id;
    std::string client = it->second.client;
    requests.erase(it);
    send_to(client, proto::cmd::kReply, proto::encode(out));
  }

  void answer_broker_query(const std::string& client, const proto::Request& req) {
    proto::Reply rep;
    rep.request_id = req.request_id;
    if (req.method == "status") {
      proto::BrokerStatus st;
      auto counts = table.counts();
      std::set<std::string> names;
      for (const auto& [s, _] : services) names.insert(s);
      if (counts.is_ok())
        for (const auto& [s, _] : *counts) names.insert(s);
      for (const auto& s : names) {
        proto::QueueStatus qs;
        qs.service = s;
        auto sit = services.find(s);
        if (sit != services.end()) {
          qs.queued = static_cast<int64_t>(sit->second.queued.size());
          qs.workers = static_cast<int64_t>(sit->second.workers.size());
          for (const auto& w : sit->second.workers) qs.leased += static_cast<int64_t>(workers[w].leased.size());
        }
        if (counts.is_ok() && counts->count(s)) {
          const auto& c = counts->at(s);
          auto get = [&](const char* k) { auto i = c.find(k); return i == c.end() ? int64_t{0} : i->second; };
          qs.done = get("done");
          qs.failed = get("failed");
          qs.dead = get("dead");
        }
        st.queues.push_back(qs);
      }
      for (const auto& [id, w] : workers) {
        st.workers.push_back(proto::WorkerStatus{w.service, w.worker_id, w.slots,
                                                 static_cast<int64_t>(w.leased.size()), w.caps});
      }
      st.rejected_frames = counters.rejected_frames.load();
      rep.ok = true;
      rep.body = proto::Bytes{proto::encode(st)};
    } else if (req.method == "job") {
      auto q = proto::decode<proto::JobStatusQuery>(req.body.data);
      if (!q.is_ok()) {
        rep.error = q.status().message();
      } else {
        std::string result;
        auto row = table.get(q->job_id, &result);
        proto::JobStatus js;
        js.job_id = q->job_id;
        if (row.is_ok()) {
          js.service = row->service;
          js.state = std::string(job_state_name(row->state));
          js.attempt = row->attempt;
          js.error = row->error;
          js.result = proto::Bytes{std::move(result)};
        } else {
          js.state = "unknown";
        }
        rep.ok = true;
        rep.body = proto::Bytes{proto::encode(js)};
      }
    } else {
      rep.error = "broker: unknown method '" + req.method + "' (status, job)";
    }
    send_to(client, proto::cmd::kReply, proto::encode(rep));
  }

  void handle(const Envelope& env) {
    using namespace proto::cmd;
    auto w = workers.find(env.identity);
    if (w != workers.end()) w->second.last_seen = monotonic_s();
    if (env.command == kReady) return on_ready(env);
    if (env.command == kResult) return on_result(env);
    if (is_external(env.identity) && (env.command == kSubmit || env.command == kRequest)) {
      // Bridges serve jobs; they neither start work nor read the system's state.
      reject(env.identity, Rejection::kForbidden, "bridge '" + env.user_id + "' may not send " + env.command);
      if (env.command == kSubmit) {
        proto::Ack ack;
        auto sub = proto::decode<proto::Submit>(env.body);
        if (sub.is_ok()) ack.job_id = sub->job_id;
        ack.error = "external bridges may not submit jobs";
        return send_to(env.identity, kAck, proto::encode(ack));
      }
      auto req = proto::decode<proto::Request>(env.body);
      return reply_error(env.identity, req.is_ok() ? req->request_id : std::string(), "external bridges may not send requests");
    }
    if (env.command == kSubmit) return on_submit(env);
    if (env.command == kRequest) return on_request(env);
    if (env.command == kReply) return on_reply(env);
    if (env.command == kHeartbeat) {
      if (w == workers.end()) {
        // A worker we do not know (we restarted, or dropped it): make it register again.
        send_to(env.identity, kDisconnect, proto::encode(proto::Disconnect{"unknown worker: send READY"}));
      }
      return;
    }
    if (env.command == kDisconnect) {
      if (w != workers.end()) drop_worker(env.identity, "worker disconnected");
      return;
    }
    reject(env.identity, Rejection::kMalformed, "unexpected command " + messaging::printable_identity(env.command));
  }

  // ------------------------------------------------------------------------------------ sockets

  // A body over max_message_bytes (but under the sockets' limit, so it was read): counted, logged, and a
  // SUBMIT answered; nothing in it is decoded. The job id is not read, so the ACK names none.
  void refuse_oversized(const Envelope& e) {
    const std::string why = e.command + " of " + std::to_string(e.body.size()) + " bytes is over broker.max_message_bytes (" +
                            std::to_string(opt.max_message_bytes) + ")";
    reject(e.identity, Rejection::kOversized, why);
    if (e.command == proto::cmd::kSubmit) {
      proto::Ack ack;
      ack.error = why;
      send_to(e.identity, proto::cmd::kAck, proto::encode(ack));
    }
  }

  // Reads what is readable on one ROUTER, bounded so timers still run under a flood.
  void drain(zmq::socket_t& socket, char tag) {
    for (int i = 0; i < 1000; ++i) {
      std::string identity;
      auto env = messaging::recv_envelope(socket, true, &identity);
      if (!env) break;
      std::string peer = tag + identity;
      if (!env->is_ok()) {
        reject(peer, Rejection::kMalformed, env->status().message());
        continue;
      }
      Envelope& e = env->value();
      e.identity = std::move(peer);
      if (tag == kExternalTag) {
        // The ZAP handler put the bridge name on the connection. A name no longer on the list was
        // revoked by a reload: its open connection gets nothing more.
        if (e.user_id.empty() || !allowlist.has_name(e.user_id)) {
          reject(e.identity, Rejection::kRevoked, "bridge '" + e.user_id + "' is not on the allowlist (revoked?)");
          if (workers.count(e.identity)) drop_worker(e.identity, "bridge revoked");
          continue;
        }
        counters.bridge_messages++;
        bridge_messages->Add({{"bridge", e.user_id}}).Increment();
      } else {
        e.user_id.clear();  // only the CURVE endpoint has a ZAP handler behind it
      }
      if (static_cast<int64_t>(e.body.size()) > opt.max_message_bytes) {
        refuse_oversized(e);
        continue;
      }
      handle(e);
    }
  }

  // Answers ZAP requests (RFC 27) for the external endpoint: admits a CURVE client whose public key is
  // on the allowlist, with the bridge's name as the user id. Anything else is refused.
  void serve_zap() {
    for (int i = 0; i < 100; ++i) {
      std::vector<std::string> frames;
      try {
        zmq::message_t msg;
        if (!zap->recv(msg, zmq::recv_flags::dontwait)) return;
        while (true) {
          if (frames.size() < kZapMaxFrames) frames.emplace_back(static_cast<const char*>(msg.data()), msg.size());
          if (!msg.more()) break;
          (void)zap->recv(msg, zmq::recv_flags::none);
        }
      } catch (const zmq::error_t& e) {
        spdlog::error("ZAP handler: recv failed: {}", e.what());
        return;
      }
      // 1.0, request id, domain, address, routing id, mechanism, credentials...
      std::string request_id = frames.size() > 1 ? frames[1] : std::string();
      std::string_view code = kZapOk;
      std::string text = "OK", user;
      const std::string address = frames.size() > 3 ? frames[3] : std::string();
      if (frames.size() < 7 || frames[0] != "1.0") {
        code = kZapError;
        text = "malformed ZAP request";
      } else if (frames[5] != "CURVE" || frames[6].size() != 32) {
        code = kZapDenied;
        text = "CURVE required";
      } else {
        user = allowlist.name_of(frames[6]);
        if (user.empty()) {
          code = kZapDenied;
          text = "key not on the allowlist";
        }
      }
      if (code != kZapOk) {
        counters.bridge_auth_failures++;
        bridge_auth_failures->Increment();
        log_denied(frames.size() > 6 ? frames[6] : std::string(), address, text);
      }
      try {
        zap->send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
        zap->send(zmq::buffer(request_id), zmq::send_flags::sndmore);
        zap->send(zmq::buffer(code), zmq::send_flags::sndmore);
        zap->send(zmq::buffer(text), zmq::send_flags::sndmore);
        zap->send(zmq::buffer(user), zmq::send_flags::sndmore);
        zap->send(zmq::message_t(), zmq::send_flags::none);  // no metadata
      } catch (const zmq::error_t& e) {
        spdlog::error("ZAP handler: reply failed: {}", e.what());
      }
    }
  }

  void log_denied(const std::string& raw_key, const std::string& address, const std::string& why) {
    double now = monotonic_s();
    auto it = denied_logged.find(raw_key);
    if (it != denied_logged.end() && now - it->second < kDeniedLogInterval_s) return;
    if (denied_logged.size() >= kDeniedLogMaxKeys) denied_logged.clear();
    denied_logged[raw_key] = now;
    std::string key = messaging::encode_curve_key(raw_key);
    spdlog::warn("external endpoint: refused {} ({}){}", address.empty() ? "a client" : address, why,
                 key.empty() ? "" : "; its public key is " + key);
  }

  // Re-reads the allowlist; on a parse error keeps the current one. Drops bridges no longer listed.
  void reload_allowlist() {
    struct stat st {};
    allowlist_exists = ::stat(opt.allowlist_path.c_str(), &st) == 0;
    allowlist_stat = st;
    auto loaded = Allowlist::load(opt.allowlist_path);
    if (!loaded.is_ok()) {
      spdlog::error("allowlist not reloaded, keeping the previous {} key(s): {}", allowlist.size(),
                    loaded.status().message());
      return;
    }
    allowlist = std::move(loaded).value();
    counters.allowlist_reloads++;
    bridge_keys->Set(static_cast<double>(allowlist.size()));
    spdlog::info("external bridges: {} key(s) on the allowlist {}{}", allowlist.size(), opt.allowlist_path,
                 allowlist_exists ? "" : " (file absent: no bridge admitted)");
    std::vector<std::string> revoked;
    for (const auto& [id, w] : workers)
      if (!w.bridge.empty() && !allowlist.has_name(w.bridge)) revoked.push_back(id);
    for (const auto& id : revoked) drop_worker(id, "bridge revoked");
  }

  bool allowlist_changed() const {
    struct stat st {};
    bool exists = ::stat(opt.allowlist_path.c_str(), &st) == 0;
    if (exists != allowlist_exists) return true;
    return exists && (st.st_mtim.tv_sec != allowlist_stat.st_mtim.tv_sec ||
                      st.st_mtim.tv_nsec != allowlist_stat.st_mtim.tv_nsec || st.st_size != allowlist_stat.st_size ||
                      st.st_ino != allowlist_stat.st_ino);
  }

  // ------------------------------------------------------------------------------------ timers

  // May `w` take `job`? A job that avoids a worker goes to another worker of its service with the same
  // device model as the avoided one (busy or not: the job waits for it) when one is connected, else to
  // any worker, the avoided one included.
  bool may_take(const LiveJob& job, const WorkerRec& w, const ServiceQueue& q) {
    if (job.avoid_worker.empty()) return true;
    const WorkerRec* avoided = nullptr;
    for (const auto& id : q.workers) {
      if (workers[id].worker_id == job.avoid_worker) avoided = &workers[id];
    }
    auto alternative = [&](const WorkerRec& o) {
      return o.worker_id != job.avoid_worker && (avoided == nullptr || o.caps.gpu_name == avoided->caps.gpu_name);
    };
    for (const auto& id : q.workers) {
      if (alternative(workers[id])) return alternative(w);
    }
    return true;
  }

  // How far down its queue a worker looks for a job it may take.
  static constexpr size_t kDispatchScan = 64;

  void dispatch() {
    for (auto& [service, q] : services) {
      if (q.queued.empty() || q.workers.empty()) continue;
      bool progress = true;
      while (!q.queued.empty() && progress) {
        progress = false;
        for (size_t k = 0; k < q.workers.size() && !q.queued.empty(); ++k) {
          const std::string identity = q.workers[(q.rr + k) % q.workers.size()];
          WorkerRec& w = workers[identity];
          if (static_cast<int>(w.leased.size()) >= w.slots) continue;
          // The first queued job this worker may take (jobs whose entry is gone are dropped on the way).
          size_t pick = 0;
          for (; pick < q.queued.size() && pick < kDispatchScan; ++pick) {
            auto it = jobs.find(q.queued[pick]);
            if (it == jobs.end() || may_take(it->second, w, q)) break;
          }
          if (pick == q.queued.size() || pick == kDispatchScan) continue;
          std::string job_id = q.queued[pick];
          q.queued.erase(q.queued.begin() + static_cast<std::ptrdiff_t>(pick));
          auto jit = jobs.find(job_id);
          if (jit == jobs.end()) {
            progress = true;
            continue;
          }
          LiveJob& job = jit->second;
          double now = monotonic_s();
          job.leased = true;
          job.worker = identity;
          job.leased_mono = now;
          double lease = lease_for(job);
          job.lease_deadline = now + lease;
          w.leased.insert(job_id);
          // A failed write leaves the row queued: the lease lives in memory, and a restart requeues it anyway.
          store_ok("lease", "lease of " + job_id, table.mark_leased(job_id, job.attempt));
          queue_wait->Add({{"service", service_label(service)}}, metrics::duration_buckets_s()).Observe(now - job.enqueued_mono);
          proto::Job msg{job.id, job.attempt, job.service, proto::Bytes{job.payload}, wall_time_s() + lease};
          publish(job.id, job.service, "leased", job.attempt);
          send_to(identity, proto::cmd::kJob, proto::encode(msg));
          progress = true;
          if (!workers.count(identity)) break;  // the send found it unreachable and dropped it
        }
        if (q.workers.empty()) break;
        q.rr = (q.rr + 1) % q.workers.size();
      }
      update_gauges(service);
    }
  }

  // The shortest heartbeat period owed to anyone (the broker's own, or a connected worker's shorter one),
  // kept in shortest_heartbeat_s for the run loop's tick; recomputed only when a worker comes or goes.
  void update_shortest_heartbeat() {
    double s = opt.heartbeat_interval_s;
    for (const auto& [id, w] : workers)
      if (w.heartbeat_s > 0) s = std::min(s, w.heartbeat_s);
    shortest_heartbeat_s = s;
  }

  void check_timers() {
    double now = monotonic_s();
    reject_log.flush();
    store_log.flush();
    if (!pending_deaths.empty()) {
      auto retry = std::move(pending_deaths);
      pending_deaths.clear();
      for (const auto& d : retry) kill(d.job, d.reason, d.worker_retry);
    }
    std::vector<std::pair<std::string, double>> lost;
    for (auto& [id, w] : workers) {
      // A worker that beats slower than the broker is judged by its own period.
      double dead_after = std::max(opt.heartbeat_interval_s, w.heartbeat_s) * opt.heartbeat_liveness;
      if (now - w.last_seen > dead_after) lost.emplace_back(id, dead_after);
    }
    for (const auto& [id, after] : lost) drop_worker(id, "worker lost: silent for " + format_value("%.1f", after) + " s");
    std::vector<std::string> expired;
    for (auto& [id, j] : jobs)
      if (j.leased && now > j.lease_deadline) expired.push_back(id);
    for (const auto& id : expired) requeue_or_kill(id, "deadline passed");
    for (auto it = requests.begin(); it != requests.end();) {
      if (now > it->second.deadline) {
        reply_error(it->second.client, it->second.client_request_id, "request timed out");
        it = requests.erase(it);
      } else {
        ++it;
      }
    }
    std::vector<std::string> idle;
    for (auto& [id, w] : workers) {
      // ... and one that expects beats more often than the broker's period gets them that often.
      double every = w.heartbeat_s > 0 ? std::min(opt.heartbeat_interval_s, w.heartbeat_s) : opt.heartbeat_interval_s;
      if (now - w.last_sent >= every) idle.push_back(id);
    }
    for (const auto& id : idle) send_to(id, proto::cmd::kHeartbeat, proto::encode(proto::Heartbeat{}));
  }
};

Status Broker::Impl::open_external() {
  if (!messaging::curve_available()) return failed_precondition("this libzmq was built without CURVE");
  KILN_RETURN_IF_ERROR(messaging::decode_curve_key(opt.curve_secret_key).status().with_context("server secret key"));
  if (opt.allowlist_path.empty()) return invalid_argument("no allowlist path");
  auto first = Allowlist::load(opt.allowlist_path);
  if (!first.is_ok()) return first.status();
  reload_allowlist();
  messaging::SocketOptions so;
  so.max_message_bytes = opt.max_message_bytes * kTransportSlack;
  try {
    // The ZAP handler must be bound before the CURVE socket: without one, libzmq admits every client.
    zap = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::rep);
    zap->set(zmq::sockopt::linger, 0);
    zap->bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("cannot bind the ZAP handler (another broker in this context?): ") + e.what());
  }
  try {
    external = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
    messaging::apply_options(*external, so);
    external->set(zmq::sockopt::router_mandatory, 1);
    external->set(zmq::sockopt::curve_server, 1);
    external->set(zmq::sockopt::curve_secretkey, opt.curve_secret_key);
    external->set(zmq::sockopt::zap_domain, "kiln.bridges");
    external->bind(opt.external_bind);
    external_endpoint = external->get(zmq::sockopt::last_endpoint);
    external_monitor = monitor(*external, "external");
  } catch (const zmq::error_t& e) {
    return unavailable("cannot bind " + opt.external_bind + ": " + e.what());
  }
  return Status::ok();
}

Broker::Broker() = default;
Broker::~Broker() = default;

Result<std::unique_ptr<Broker>> Broker::create(zmq::context_t& context, BrokerOptions options,
                                               std::shared_ptr<prometheus::Registry> metrics) {
  auto table = JobTable::open(options.db_path, options.max_table_bytes);
  if (!table.is_ok()) return table.status().with_context("broker: job table " + options.db_path);
  auto active = table->load_active();
  if (!active.is_ok()) return active.status().with_context("broker: loading jobs");
  table->set_write_fault(options.store_write_fault);
  std::unique_ptr<Broker> b(new Broker());
  b->impl_ = std::make_unique<Impl>(context, std::move(options), std::move(table).value(), std::move(metrics));
  Impl& m = *b->impl_;
  messaging::SocketOptions so;
  so.max_message_bytes = m.opt.max_message_bytes * kTransportSlack;
  try {
    m.router = std::make_unique<zmq::socket_t>(context, zmq::socket_type::router);
    messaging::apply_options(*m.router, so);
    m.router->set(zmq::sockopt::router_mandatory, 1);
    m.router->bind(m.opt.bind);
    m.endpoint = m.router->get(zmq::sockopt::last_endpoint);
    m.router_monitor = m.monitor(*m.router, "internal");
    if (!m.opt.events_bind.empty()) {
      m.pub = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pub);
      m.pub->set(zmq::sockopt::linger, 0);
      m.pub->bind(m.opt.events_bind);
      m.events_endpoint = m.pub->get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return unavailable("broker: cannot bind " + m.opt.bind + ": " + e.what());
  }
  if (!m.opt.external_bind.empty()) KILN_RETURN_IF_ERROR(m.open_external().with_context("broker: external endpoint"));
  // Jobs that were leased when the broker stopped go back to the queue: their workers are gone.
  size_t requeued = 0;
  for (auto& row : *active) {
    if (row.state == JobState::kLeased) {
      ++requeued;
      (void)m.table.requeue(row.id, row.attempt, "broker restarted");
    }
    LiveJob j;
    j.id = row.id;
    j.service = row.service;
    j.payload = std::move(row.payload);
    j.attempt = row.attempt;
    j.timeout_s = row.timeout_s;
    j.avoid_worker = std::move(row.avoid_worker);
    m.enqueue(std::move(j));
  }
  if (!active->empty())
    spdlog::info("broker: resumed {} job(s) from {} ({} were leased)", active->size(), m.opt.db_path, requeued);
  return b;
}

const std::string& Broker::endpoint() const { return impl_->endpoint; }
const std::string& Broker::events_endpoint() const { return impl_->events_endpoint; }
const std::string& Broker::external_endpoint() const { return impl_->external_endpoint; }
const BrokerCounters& Broker::counters() const { return impl_->counters; }

void Broker::run(const std::atomic<bool>& stop, std::atomic<bool>* reload_allowlist) {
  Impl& m = *impl_;
  spdlog::info("broker: serving on {}", m.endpoint);
  if (m.external) spdlog::info("broker: external bridges (CURVE) on {}", m.external_endpoint);
  constexpr double kAllowlistCheck_s = 1.0;  // a stat() per second: edits apply without a SIGHUP too
  double next_timers = 0, next_allowlist_check = 0;
  while (!stop.load()) {
    zmq::pollitem_t items[5] = {{static_cast<void*>(*m.router), 0, ZMQ_POLLIN, 0}};
    int n_items = 1;
    if (m.external) {
      items[n_items++] = {static_cast<void*>(*m.external), 0, ZMQ_POLLIN, 0};
      items[n_items++] = {static_cast<void*>(*m.zap), 0, ZMQ_POLLIN, 0};
    }
    for (zmq::socket_t* pair : {m.router_monitor.get(), m.external_monitor.get()})
      if (pair != nullptr) items[n_items++] = {static_cast<void*>(*pair), 0, ZMQ_POLLIN, 0};
    const long tick_ms = std::max(10L, static_cast<long>(m.shortest_heartbeat_s * 1000 / 4));
    try {
      zmq::poll(items, n_items, std::chrono::milliseconds(tick_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;  // a signal (SIGHUP, SIGTERM): the checks below run now
    }
    if (m.external) {
      double now = monotonic_s();
      bool asked = reload_allowlist != nullptr && reload_allowlist->exchange(false);
      if (asked || (now >= next_allowlist_check && m.allowlist_changed())) m.reload_allowlist();
      if (now >= next_allowlist_check) next_allowlist_check = now + kAllowlistCheck_s;
      m.serve_zap();
    }
    m.drain(*m.router, kInternalTag);
    if (m.external) m.drain(*m.external, kExternalTag);
    m.drain_monitor(m.router_monitor.get(), "internal");
    m.drain_monitor(m.external_monitor.get(), "external");
    m.dispatch();
    double now = monotonic_s();
    if (now >= next_timers) {
      m.check_timers();
      m.dispatch();
      next_timers = now + tick_ms / 1000.0;
    }
  }
  // Tell workers we are going so they reconnect promptly to the next broker.
  for (const auto& [id, w] : m.workers)
    (void)m.send_raw(id, proto::cmd::kDisconnect, proto::encode(proto::Disconnect{"broker stopping"}));
  spdlog::info("broker: stopped");
}

}  // namespace kiln::broker
