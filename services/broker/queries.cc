#include "kiln/broker/queries.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include "kiln/core/hash.h"
#include "kiln/messaging/frames.h"
#include "kiln/proto/payloads.h"

namespace kiln::broker {

namespace {

proto::BrokerStatus status_of(JobQueue& queue, int64_t rejected_frames) {
  proto::BrokerStatus st;
  auto counts = queue.table().counts();
  std::set<std::string> names;
  for (const auto& [s, _] : queue.services()) names.insert(s);
  if (counts.is_ok())
    for (const auto& [s, _] : *counts) names.insert(s);
  for (const auto& s : names) {
    proto::QueueStatus qs;
    qs.service = s;
    auto sit = queue.services().find(s);
    if (sit != queue.services().end()) {
      qs.queued = static_cast<int64_t>(sit->second.queued.size());
      qs.workers = static_cast<int64_t>(sit->second.workers.size());
      for (const auto& id : sit->second.workers)
        if (const Worker* w = queue.worker(id)) qs.leased += static_cast<int64_t>(w->leased.size());
    }
    if (counts.is_ok() && counts->count(s)) {
      const auto& c = counts->at(s);
      auto get = [&](const char* k) {
        auto i = c.find(k);
        return i == c.end() ? int64_t{0} : i->second;
      };
      qs.done = get("done");
      qs.failed = get("failed");
      qs.dead = get("dead");
    }
    st.queues.push_back(qs);
  }
  for (const auto& [id, job] : queue.jobs()) {
    if (job.leased || job.device.empty() || queue.device_served(job)) continue;
    for (auto& qs : st.queues)
      if (qs.service == job.service) ++qs.waiting_for_device[job.device];
  }
  for (const auto& [id, w] : queue.workers()) {
    st.workers.push_back(
        proto::WorkerStatus{w.service, w.worker_id, w.slots, static_cast<int64_t>(w.leased.size()), w.caps});
  }
  st.rejected_frames = rejected_frames;
  return st;
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// The name a blob request is about: a lowercase hex sha256, or an error that says which method got what.
Status check_name(const proto::Request& req, const std::string& name) {
  if (is_sha256_hex(name)) return Status::ok();
  return invalid_argument(req.method + ": the name is not a lowercase hex sha256");
}

// "blob.put": the name must be the content's sha256, so nobody can plant content under another's name.
Status put_blob(const proto::Request& req, JobTable& table) {
  KILN_ASSIGN_OR_RETURN(proto::Blob blob, proto::decode<proto::Blob>(req.body.data));
  KILN_RETURN_IF_ERROR(check_name(req, blob.sha256));
  if (sha256_hex(blob.data.data) != blob.sha256)
    return invalid_argument("blob.put: the content does not hash to " + blob.sha256);
  return table.put_blob(blob.sha256, blob.data.data);
}

// "blob.get" and "blob.has": a BlobQuery with a valid name.
Result<std::string> queried_name(const proto::Request& req) {
  KILN_ASSIGN_OR_RETURN(proto::BlobQuery q, proto::decode<proto::BlobQuery>(req.body.data));
  KILN_RETURN_IF_ERROR(check_name(req, q.sha256));
  return q.sha256;
}

Result<std::string> get_blob(const proto::Request& req, JobTable& table) {
  KILN_ASSIGN_OR_RETURN(std::string name, queried_name(req));
  KILN_ASSIGN_OR_RETURN(std::string data, table.get_blob(name));
  return proto::encode(proto::Blob{name, proto::Bytes{std::move(data)}});
}

Status has_blob(const proto::Request& req, JobTable& table) {
  KILN_ASSIGN_OR_RETURN(std::string name, queried_name(req));
  KILN_ASSIGN_OR_RETURN(bool held, table.has_blob(name));
  return held ? Status::ok() : not_found("no blob " + name);
}

}  // namespace

proto::Reply answer_broker_query(const proto::Request& req, JobQueue& queue, int64_t rejected_frames) {
  proto::Reply rep;
  rep.request_id = req.request_id;
  if (req.method == "status") {
    rep.ok = true;
    rep.body = proto::Bytes{proto::encode(status_of(queue, rejected_frames))};
  } else if (req.method == "job") {
    auto q = proto::decode<proto::JobStatusQuery>(req.body.data);
    if (!q.is_ok()) {
      rep.error = q.status().message();
    } else if (!messaging::is_printable_utf8(q->job_id)) {
      rep.error = "job: job ids are UTF-8 text without control characters";
    } else {
      std::string result;
      auto row = queue.table().get(q->job_id, &result);
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
  } else if (req.method == proto::blob_method::kPut) {
    Status st = put_blob(req, queue.table());
    rep.ok = st.is_ok();
    rep.error = st.is_ok() ? "" : st.message();
  } else if (req.method == proto::blob_method::kHas) {
    Status st = has_blob(req, queue.table());
    rep.ok = st.is_ok();
    rep.error = st.is_ok() ? "" : st.message();
  } else if (req.method == proto::blob_method::kGet) {
    auto blob = get_blob(req, queue.table());
    rep.ok = blob.is_ok();
    if (blob.is_ok())
      rep.body = proto::Bytes{std::move(blob).value()};
    else
      rep.error = blob.status().message();
  } else {
    rep.error = "broker: unknown method '" + messaging::printable_identity(req.method) +
                "' (status, job, blob.put, blob.get, blob.has)";
  }
  return rep;
}

}  // namespace kiln::broker
