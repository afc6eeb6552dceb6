#include "kiln/broker/commands.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/broker/bridge_auth.h"
#include "kiln/broker/queries.h"
#include "kiln/core/time.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"

namespace kiln::broker {

namespace {

using messaging::Envelope;

// Worker ids appear in logs and status replies: printable ASCII, bounded.
constexpr size_t kMaxWorkerId = 128;
constexpr size_t kMaxJobId = 512;
constexpr int kMaxSlots = 1024;
// A READY's heartbeat period is bounded, so it cannot make a worker unkillable or ask for a flood of beats.
constexpr double kMinHeartbeat_s = 0.01;
constexpr double kMaxHeartbeat_s = 60.0;
// A forwarded request waits this long at least and at most for its answer.
constexpr double kMinRequestTimeout_s = 0.1;
constexpr double kMaxRequestTimeout_s = 120.0;

// Job and request ids are echoed in replies (msgpack str fields), published as events and logged.
constexpr std::string_view kBadJobId = "job ids are 1-512 bytes of UTF-8 text without control characters";
constexpr std::string_view kBadRequestId = "request ids are UTF-8 text without control characters";

bool valid_job_id(std::string_view s) { return !s.empty() && s.size() <= kMaxJobId && messaging::is_printable_utf8(s); }

// A follow-up's avoid_worker and device are compared with READYs' worker ids and gpu names, and logged.
constexpr std::string_view kBadRouting = "avoid_worker and device are at most 128 bytes of printable text";
bool valid_routing(const proto::FollowUp& f) {
  auto ok = [](std::string_view s) { return s.size() <= kMaxWorkerId && messaging::is_printable_utf8(s); };
  return ok(f.avoid_worker) && ok(f.device);
}

bool valid_worker_id(std::string_view s) {
  if (s.empty() || s.size() > kMaxWorkerId) return false;
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

Rejection rejection_for_service(const Status& st) {
  return st.code() == StatusCode::kResourceExhausted ? Rejection::kTooManyServices : Rejection::kInvalidName;
}

}  // namespace

std::string printable_peer(const std::string& peer) {
  if (peer.empty()) return "?";
  return (is_external(peer) ? "bridge peer " : "") + messaging::printable_identity(std::string_view(peer).substr(1));
}

Commands::Commands(const BrokerOptions& options, JobQueue& queue, BrokerMetrics& metrics, Outbox& outbox)
    : opt_(options),
      queue_(queue),
      metrics_(metrics),
      out_(outbox),
      reject_log_("rejected messages", options.log_limits, monotonic_s) {}

void Commands::reject(const std::string& peer, Rejection reason, const std::string& why) {
  metrics_.rejected(reason);
  const std::string_view label = rejection_label(reason);
  reject_log_.warn(label, "rejected message from {} ({}): {}", printable_peer(peer), label, why);
}

void Commands::ack(const std::string& peer, const proto::Ack& a) {
  out_.send(peer, proto::cmd::kAck, proto::encode(a));
}

void Commands::reply_error(const std::string& client, const std::string& request_id, const std::string& error) {
  proto::Reply rep;
  rep.request_id = request_id;
  rep.ok = false;
  rep.error = error;
  out_.send(client, proto::cmd::kReply, proto::encode(rep));
}

void Commands::handle(const Envelope& env) {
  using namespace proto::cmd;
  queue_.heard_from(env.identity);
  if (env.command == kReady) return on_ready(env);
  if (env.command == kResult) return on_result(env);
  // Bridges serve jobs; they neither start work nor read the system's state.
  if (is_external(env.identity) && (env.command == kSubmit || env.command == kRequest)) return refuse_from_bridge(env);
  if (env.command == kSubmit) return on_submit(env);
  if (env.command == kRequest) return on_request(env);
  if (env.command == kReply) return on_reply(env);
  if (env.command == kHeartbeat) {
    // A worker we do not know (we restarted, or dropped it): make it register again.
    if (queue_.worker(env.identity) == nullptr)
      out_.send(env.identity, kDisconnect, proto::encode(proto::Disconnect{"unknown worker: send READY"}));
    return;
  }
  if (env.command == kDisconnect) return queue_.remove_worker(env.identity, "worker disconnected");
  reject(env.identity, Rejection::kMalformed, "unexpected command " + messaging::printable_identity(env.command));
}

void Commands::refuse_from_bridge(const Envelope& env) {
  reject(env.identity, Rejection::kForbidden, "bridge '" + env.user_id + "' may not send " + env.command);
  if (env.command == proto::cmd::kSubmit) {
    proto::Ack a;
    auto sub = proto::decode<proto::Submit>(env.body);
    if (sub.is_ok() && valid_job_id(sub->job_id)) a.job_id = sub->job_id;
    a.error = "external bridges may not submit jobs";
    return ack(env.identity, a);
  }
  auto req = proto::decode<proto::Request>(env.body);
  const bool named = req.is_ok() && messaging::is_printable_utf8(req->request_id);
  reply_error(env.identity, named ? req->request_id : std::string(), "external bridges may not send requests");
}

void Commands::refuse_oversized(const Envelope& e) {
  const std::string why = e.command + " of " + std::to_string(e.body.size()) +
                          " bytes is over broker.max_message_bytes (" + std::to_string(opt_.max_message_bytes) + ")";
  reject(e.identity, Rejection::kOversized, why);
  if (e.command == proto::cmd::kSubmit) {  // the job id is not read, so the ACK names none
    proto::Ack a;
    a.error = why;
    ack(e.identity, a);
  }
}

// A READY that is refused is answered with an ACK that says why (a worker that misnamed its service
// learns it); the peer stays unregistered.
void Commands::refuse_ready(const std::string& peer, Rejection reason, const std::string& why) {
  reject(peer, reason, "bad READY: " + why);
  proto::Ack a;
  a.error = "READY refused: " + why;
  ack(peer, a);
}

void Commands::on_ready(const Envelope& env) {
  auto ready = proto::decode<proto::Ready>(env.body);
  if (!ready.is_ok()) return reject(env.identity, Rejection::kBadReady, "bad READY: " + ready.status().message());
  if (ready->slots < 1 || ready->slots > kMaxSlots)
    return reject(env.identity, Rejection::kBadReady, "bad READY: slots out of range (1-1024)");
  if (Status st = queue_.admit_service(ready->service); !st.is_ok())
    return refuse_ready(env.identity, rejection_for_service(st), st.message());
  if (!valid_worker_id(ready->worker_id))
    return refuse_ready(env.identity, Rejection::kInvalidName, "worker ids are 1-128 bytes of printable ASCII");
  if (ready->caps.gpu_name.size() > kMaxWorkerId || !messaging::is_printable_utf8(ready->caps.gpu_name))
    return refuse_ready(env.identity, Rejection::kInvalidName, "device names are at most 128 bytes of printable text");
  const bool bridge = is_external(env.identity);
  if (bridge && std::find(opt_.external_services.begin(), opt_.external_services.end(), ready->service) ==
                    opt_.external_services.end())
    return reject(env.identity, Rejection::kForbidden,
                  "bad READY: bridge '" + env.user_id + "' may not serve '" + ready->service + "'");
  Worker w;
  w.identity = env.identity;
  w.service = ready->service;
  w.worker_id = ready->worker_id;
  w.bridge = bridge ? env.user_id : std::string();
  w.slots = ready->slots;
  w.caps = ready->caps;
  if (std::isfinite(ready->heartbeat_interval_s) && ready->heartbeat_interval_s > 0)
    w.heartbeat_s = std::clamp(ready->heartbeat_interval_s, kMinHeartbeat_s, kMaxHeartbeat_s);
  if (Status st = queue_.add_worker(std::move(w)); !st.is_ok())
    return refuse_ready(env.identity, Rejection::kTooManyWorkers, st.message());
}

// Tells a worker that its RESULT for `job_id` was refused and why; the job has been released already.
void Commands::tell_result_refused(const std::string& peer, const std::string& job_id, const std::string& why) {
  metrics_.result_refused();
  proto::Ack a;
  a.job_id = job_id;
  a.error = "RESULT refused: " + why + " (the job was released)";
  ack(peer, a);
}

void Commands::on_result(const Envelope& env) {
  auto res = proto::decode<proto::ResultMsg>(env.body);
  if (!res.is_ok()) {
    reject(env.identity, Rejection::kBadResult, "bad RESULT: " + res.status().message());
    // When it still names a job leased to this peer, that job is released now, not when its lease ends.
    auto job_id = proto::peek_string(env.body, "job_id");
    if (job_id.is_ok() && queue_.release(env.identity, *job_id, "result refused: " + res.status().message()))
      tell_result_refused(env.identity, *job_id, res.status().message());
    return;
  }
  // No job has such an id (the broker admits none): nothing to release, and the id is not echoed.
  if (!valid_job_id(res->job_id))
    return reject(env.identity, Rejection::kBadResult, "bad RESULT: " + std::string(kBadJobId));
  switch (queue_.end_lease(env.identity, res->job_id, res->attempt)) {
    case JobQueue::LeaseEnd::kUnknownWorker:
      // From a worker we dropped (or a broker restart): its job was requeued; tell it to re-register.
      return out_.send(env.identity, proto::cmd::kDisconnect, proto::encode(proto::Disconnect{"unknown worker"}));
    case JobQueue::LeaseEnd::kLate: return;
    case JobQueue::LeaseEnd::kEnded: break;
  }
  const std::string& job_id = res->job_id;
  if (res->outcome == proto::outcome::kRetry)
    return queue_.requeue(job_id, "worker asked to retry: " + res->error, /*worker_retry=*/true);
  // A result that cannot be recorded as sent is refused, and its job goes back to the queue at once
  // (attempt + 1) for a better-behaved worker: the lease it held is over.
  auto refuse = [&](Rejection reason, const std::string& why) {
    reject(env.identity, reason, "bad RESULT for " + job_id + ": " + why);
    queue_.requeue(job_id, "result refused: " + why);
    tell_result_refused(env.identity, job_id, why);
  };
  if (res->outcome != proto::outcome::kOk && res->outcome != proto::outcome::kFailed)
    return refuse(Rejection::kBadResult, "outcome must be ok, failed or retry");
  for (const auto& f : res->next) {
    if (!valid_job_id(f.job_id)) return refuse(Rejection::kBadResult, "follow-up: " + std::string(kBadJobId));
    if (!valid_routing(f)) return refuse(Rejection::kBadResult, "follow-up: " + std::string(kBadRouting));
    if (Status st = queue_.admit_service(f.service); !st.is_ok())
      return refuse(rejection_for_service(st), "follow-up: " + st.message());
    if (is_external(env.identity)) {
      if (Status st = check_bridge_followup(f, opt_.external_followups); !st.is_ok()) {
        const Worker* w = queue_.worker(env.identity);
        return refuse(Rejection::kForbidden, "bridge '" + (w ? w->bridge : env.user_id) + "': " + st.message());
      }
    }
  }
  // A worker that dead-letters its job says "failed" and sends the scorer the DeadLetter: the job is dead,
  // as one the broker gives up on after max_attempts.
  JobState final_state = res->outcome == proto::outcome::kOk  ? JobState::kDone
                         : proto::is_worker_dead_letter(*res) ? JobState::kDead
                                                              : JobState::kFailed;
  (void)queue_.complete(job_id, final_state, res->payload.data, res->error, res->next);  // a failure requeues it
}

namespace {
// Why a SUBMIT's scheduling fields are refused ("" when they are fine): the campaign becomes a group in a
// queue, so it is bounded like the ids it names.
std::string bad_scheduling(const proto::Submit& sub) {
  if (sub.priority < proto::kMinPriority || sub.priority > proto::kMaxPriority)
    return "priority " + std::to_string(sub.priority) + " is outside " + std::to_string(proto::kMinPriority) + ".." +
           std::to_string(proto::kMaxPriority);
  if (!sub.campaign.empty() && !proto::is_campaign_id(sub.campaign))
    return "the campaign is not a campaign id (1-" + std::to_string(proto::kMaxCampaignIdChars) +
           " characters of [A-Za-z0-9_.-])";
  return "";
}
}  // namespace

void Commands::on_submit(const Envelope& env) {
  auto sub = proto::decode<proto::Submit>(env.body);
  proto::Ack a;
  if (!sub.is_ok()) {
    reject(env.identity, Rejection::kBadSubmit, "bad SUBMIT: " + sub.status().message());
    a.error = sub.status().message();
    return ack(env.identity, a);
  }
  if (!valid_job_id(sub->job_id)) {  // the ACK names no job: the id is not echoed
    a.error = kBadJobId;
    reject(env.identity, Rejection::kBadSubmit, "bad SUBMIT: " + a.error);
    return ack(env.identity, a);
  }
  a.job_id = sub->job_id;
  if (std::string why = bad_scheduling(*sub); !why.empty()) {
    a.error = why;
    reject(env.identity, Rejection::kBadSubmit, "bad SUBMIT: " + a.error);
    return ack(env.identity, a);
  }
  if (Status st = queue_.admit_service(sub->service); !st.is_ok()) {
    a.error = st.message();
    reject(env.identity, rejection_for_service(st), "bad SUBMIT: " + a.error);
    return ack(env.identity, a);
  }
  JobRow row;
  row.id = sub->job_id;
  row.service = sub->service;
  row.payload = std::move(sub->payload.data);
  row.timeout_s = sub->timeout_s;
  row.priority = sub->priority;
  row.campaign = sub->campaign;
  auto inserted = queue_.submit(std::move(row));
  if (!inserted.is_ok()) {
    a.error = "the broker cannot write its job table (" + inserted.status().message() + "); retry later";
    a.retryable = true;
    reject(env.identity, Rejection::kStoreUnavailable, "SUBMIT of " + a.job_id + " refused: " + a.error);
    return ack(env.identity, a);
  }
  a.accepted = true;
  a.duplicate = !*inserted;
  ack(env.identity, a);
}

void Commands::on_request(const Envelope& env) {
  auto req = proto::decode<proto::Request>(env.body);
  if (!req.is_ok()) return reject(env.identity, Rejection::kBadRequest, "bad REQUEST: " + req.status().message());
  if (!messaging::is_printable_utf8(req->request_id)) {  // answered without it: it is not echoed
    reject(env.identity, Rejection::kBadRequest, "bad REQUEST: " + std::string(kBadRequestId));
    return reply_error(env.identity, "", std::string(kBadRequestId));
  }
  if (req->service == proto::svc::kBroker) {
    proto::Reply rep = answer_broker_query(*req, queue_, metrics_.counters().rejected_frames.load());
    std::string reply = proto::encode(rep);
    if (req->method.starts_with("blob.")) metrics_.blob_bytes(env.body.size() + reply.size());
    return out_.send(env.identity, proto::cmd::kReply, reply);
  }
  if (!JobQueue::valid_service_name(req->service)) {
    reject(env.identity, Rejection::kInvalidName, "bad REQUEST: not a service name");
    return reply_error(env.identity, req->request_id,
                       "service names are 1-64 bytes of letters, digits, '.', '_' and '-'");
  }
  const std::string worker = queue_.next_worker(req->service);  // a lookup: a request names no new service
  if (worker.empty())
    return reply_error(env.identity, req->request_id, "no worker connected for service '" + req->service + "'");
  std::string fwd_id = "f" + std::to_string(next_forward_id_++);
  double timeout = std::clamp(req->timeout_s, kMinRequestTimeout_s, kMaxRequestTimeout_s);
  requests_[fwd_id] = PendingRequest{env.identity, req->request_id, worker, monotonic_s() + timeout};
  proto::Request fwd = *req;
  fwd.request_id = fwd_id;
  out_.send(worker, proto::cmd::kRequest, proto::encode(fwd));
}

void Commands::on_reply(const Envelope& env) {
  auto rep = proto::decode<proto::Reply>(env.body);
  if (!rep.is_ok()) return reject(env.identity, Rejection::kBadReply, "bad REPLY: " + rep.status().message());
  auto it = requests_.find(rep->request_id);
  if (it == requests_.end()) return;  // timed out already
  proto::Reply out = *rep;
  out.request_id = it->second.client_request_id;
  std::string client = it->second.client;
  requests_.erase(it);
  out_.send(client, proto::cmd::kReply, proto::encode(out));
}

void Commands::fail_requests_to(const std::string& worker) {
  // Taken out of the table before answering: an answer that fails may remove another peer, and with it
  // more requests.
  std::vector<PendingRequest> orphaned;
  for (auto r = requests_.begin(); r != requests_.end();) {
    if (r->second.worker == worker) {
      orphaned.push_back(std::move(r->second));
      r = requests_.erase(r);
    } else {
      ++r;
    }
  }
  for (const auto& p : orphaned) reply_error(p.client, p.client_request_id, "worker for the request went away");
}

void Commands::expire_requests() {
  const double now = monotonic_s();
  std::vector<PendingRequest> expired;
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (now > it->second.deadline) {
      expired.push_back(std::move(it->second));
      it = requests_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& p : expired) reply_error(p.client, p.client_request_id, "request timed out");
}

}  // namespace kiln::broker
