#include "commands.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "campaign_views.h"
#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/core/signals.h"
#include "kiln/core/time.h"
#include "kiln/messaging/client.h"
#include "kiln/messaging/endpoint.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::cli {

namespace fs = std::filesystem;
using nlohmann::json;

int fail(const std::string& line) {
  std::fprintf(stderr, "kiln: %s\n", line.c_str());
  return 1;
}

std::string Common::broker_endpoint() const {
  return broker.empty() ? messaging::connect_endpoint(config.broker.bind) : broker;
}

Status check_endpoint(const std::string& endpoint) {
  if (endpoint.empty()) return Status::ok();
  for (const char* scheme : {"ipc://", "inproc://"})
    if (endpoint.rfind(scheme, 0) == 0 && endpoint.size() > std::string(scheme).size()) return Status::ok();
  const std::string tcp = "tcp://";
  const size_t colon = endpoint.rfind(':');
  const std::string port = colon == std::string::npos ? "" : endpoint.substr(colon + 1);
  const bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
  if (endpoint.rfind(tcp, 0) == 0 && colon > tcp.size() && digits && std::stoi(port) >= 1 && std::stoi(port) <= 65535)
    return Status::ok();
  return invalid_argument("expected tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555) or ipc://PATH, got \"" + endpoint +
                          "\"");
}

std::string with_path(const std::string& path, const std::string& message) {
  return message.rfind(path + ":", 0) == 0 ? message : path + ": " + message;
}

namespace {

// An id given with --campaign-id that names a campaign already: the same task's is that campaign (nothing
// is submitted again); another task's is refused, since the id would show a campaign of something else.
Result<bool> campaign_exists(messaging::Client& client, const std::string& cid, const std::string& task_id) {
  KILN_ASSIGN_OR_RETURN(std::optional<proto::CampaignInfo> known, find_campaign(client, cid));
  if (!known) return false;
  if (known->task_id != task_id)
    return invalid_argument("--campaign-id " + cid + ": that campaign runs another task ('" + known->task_name +
                            "', task id " + known->task_id.substr(0, 12) + "); choose another id");
  return true;
}

// The progress line of one campaign: "softmax-3f2a [#####...] 3/9 best 1.52x (1 not evaluated)".
std::string progress_line(const proto::CampaignInfo& info) {
  constexpr int kWidth = 20;
  const int64_t total = info.budget + 1;
  const int filled = total > 0 ? static_cast<int>(std::min<int64_t>(kWidth, kWidth * info.scored / total)) : 0;
  char buf[96];
  std::snprintf(buf, sizeof buf, " %lld/%lld best ", static_cast<long long>(info.scored),
                static_cast<long long>(total));
  std::string line =
      info.campaign_id + " [" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "]" + buf +
      (info.best_speedup > 0 ? format_speedup(info.best_speedup, info.best_speedup_lo, info.best_speedup_hi)
                             : std::string("-"));
  if (info.not_evaluated > 0) line += " (" + std::to_string(info.not_evaluated) + " not evaluated)";
  return line + "  ";
}

// The ingest service's refusal of campaign `id` ("" while it has none).
std::string refusal_of(messaging::Client& client, const std::string& id) {
  auto body = client.request("broker", "job", proto::encode(proto::JobStatusQuery{proto::job_id::ingest(id)}), 5.0);
  if (!body.is_ok()) return "";
  auto js = proto::decode<proto::JobStatus>(*body);
  if (js.is_ok() && (js->state == "failed" || js->state == "dead")) return js->error.empty() ? "refused" : js->error;
  return "";
}

}  // namespace

Result<std::string> submit_task(const Common& c, const SubmitOptions& o) {
  if (!o.campaign_id.empty() && !proto::is_campaign_id(o.campaign_id)) {
    return invalid_argument("--campaign-id: expected 1-" + std::to_string(proto::kMaxCampaignIdChars) +
                            " characters of [A-Za-z0-9_.-], got \"" + o.campaign_id + "\"");
  }
  auto files = task::load_package(o.dir);
  if (!files.is_ok()) return invalid_argument(with_path(o.dir, files.status().message()));
  auto spec = task::parse_task(*files);
  if (!spec.is_ok()) return invalid_argument(with_path(o.dir, spec.status().message()));
  if (o.proposer == "tuner" && task::kernel_regions_empty(*files, *spec)) {
    return invalid_argument(with_path(o.dir, spec->kernel_file + ": the editable region is empty, so the tuner has "
                                                                 "nothing to tune: --proposer llm or external writes "
                                                                 "the kernel"));
  }
  std::string tid = proto::task_id(*files);
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  if (!o.campaign_id.empty()) {
    KILN_ASSIGN_OR_RETURN(bool exists, campaign_exists(client, o.campaign_id, tid));
    if (exists) {
      std::fprintf(stderr, "kiln: campaign %s exists already: nothing submitted\n", o.campaign_id.c_str());
      return o.campaign_id;
    }
  }
  // A campaign id names the task and is unique per submission.
  std::string nonce = std::to_string(wall_time_s()) + ":" + std::to_string(::getpid()) + ":" + o.dir;
  std::string cid = o.campaign_id.empty() ? spec->name + "-" + sha256_hex(tid + nonce).substr(0, 10) : o.campaign_id;
  proto::IngestRequest req;
  req.campaign_id = cid;
  req.budget = o.budget >= 0 ? o.budget : c.config.scorer.default_budget;
  req.proposer = o.proposer;
  req.max_in_flight = o.max_in_flight > 0 ? o.max_in_flight : c.config.scorer.max_in_flight;
  req.files = std::move(files).value();
  req.target_speedup = o.target_speedup;
  req.patience = o.patience;
  proto::Submit sub{std::string(proto::svc::kIngest), proto::job_id::ingest(cid), proto::Bytes{proto::encode(req)}, 0};
  sub.priority = o.priority;
  sub.campaign = cid;  // every job of the campaign follows from this one and keeps both
  auto ack = client.submit(sub, 10.0);
  if (!ack.is_ok()) return ack.status();
  if (!ack->accepted) return invalid_argument("broker refused the submission: " + ack->error);
  return cid;
}

int wait_for_campaigns(const Common& c, const std::vector<std::string>& ids, double timeout_s, bool quiet,
                       const std::function<bool()>& tick) {
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  const double start = monotonic_s();
  const bool tty = ::isatty(2);
  // Ends the progress line before any other output, so a message never lands in its middle.
  auto end_line = [&] {
    if (tty && !quiet) std::fprintf(stderr, "\n");
  };
  std::string last_line;
  while (true) {
    // An ingest failure (a package the ingest service refused) ends the wait with its reason.
    for (const auto& id : ids) {
      if (std::string why = refusal_of(client, id); !why.empty()) {
        end_line();
        return fail("campaign " + id + " was refused: " + why);
      }
    }
    auto all = fetch_campaigns(client, ids);
    size_t done = 0;
    std::string line;
    if (all.is_ok()) {
      for (const auto& id : ids)
        for (const auto& info : *all) {
          if (info.campaign_id != id) continue;
          if (info.state == "done") ++done;
          line += progress_line(info);
        }
    } else {
      line = "waiting for the scorer: " + all.status().message();
    }
    if (!quiet && line != last_line) {
      std::fprintf(stderr, tty ? "\r%s" : "%s\n", line.c_str());
      last_line = line;
    }
    if (all.is_ok() && done == ids.size()) {
      end_line();
      return 0;
    }
    if (timeout_s > 0 && monotonic_s() - start > timeout_s) {
      end_line();
      return fail("not finished after " + std::to_string(static_cast<int>(timeout_s)) + " s");
    }
    for (int i = 0; i < 5; ++i) {
      if (tick && !tick()) {
        end_line();
        return kInterruptedExit;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

int campaigns_exit_code(const std::vector<proto::CampaignInfo>& campaigns) {
  int rc = 0;
  for (const auto& info : campaigns) {
    if (std::string problem = campaign_problem(info); !problem.empty()) {
      std::fprintf(stderr, "kiln: campaign %s %s: %s\n", info.campaign_id.c_str(), info.state.c_str(), problem.c_str());
      rc = kIncompleteExit;
    }
  }
  return rc;
}

int cmd_submit(const Common& c, const SubmitOptions& o) {
  // Ctrl-C from here on stops the wait, never the campaign (installed before the campaign exists, so no
  // signal can fall between the two).
  const std::atomic<bool>* stop = o.wait ? &stop_on_signals() : nullptr;
  auto cid = submit_task(c, o);
  if (!cid.is_ok()) return fail(cid.status().message());
  if (!o.wait) {
    if (c.json)
      std::printf("%s\n", json{{"campaign_id", *cid}, {"state", "submitted"}}.dump(2).c_str());
    else
      std::printf("submitted campaign %s\n", cid->c_str());
    return 0;
  }
  if (!c.json) std::printf("submitted campaign %s\n", cid->c_str());
  std::fflush(stdout);
  int rc = wait_for_campaigns(c, {*cid}, o.timeout_s, c.json, [&] { return !stop->load(); });
  const std::string goes_on =
      "campaign " + *cid + " goes on (kiln status " + *cid + "; kiln cancel " + *cid + " stops it)";
  if (rc == kInterruptedExit) {
    std::fprintf(stderr, "kiln: stopped waiting; %s\n", goes_on.c_str());
    return rc;
  }
  if (rc != 0) {
    std::fprintf(stderr, "kiln: %s\n", goes_on.c_str());
    return rc;
  }
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  auto mine = find_campaign(client, *cid);
  if (!mine.is_ok()) return fail(mine.status().message());
  if (!*mine) return fail(unknown_campaign(*cid));
  if (c.json)
    std::printf("%s\n", to_json(**mine).dump(2).c_str());
  else
    print_results_table({**mine});
  std::fflush(stdout);
  return campaigns_exit_code({**mine});
}

int cmd_task_validate(const Common& c, const std::string& dir) {
  auto files = task::load_package(dir);
  if (!files.is_ok()) {
    const std::string error = with_path(dir, files.status().message());
    if (c.json) std::printf("%s\n", json{{"valid", false}, {"error", error}}.dump(2).c_str());
    return fail(error);
  }
  auto spec = task::parse_task(*files);
  if (!spec.is_ok()) {
    const std::string error = with_path(dir, spec.status().message());
    if (c.json) std::printf("%s\n", json{{"valid", false}, {"error", error}}.dump(2).c_str());
    return fail(error);
  }
  size_t space = 1;
  for (const auto& [k, v] : spec->params) space *= v.size();
  if (c.json) {
    std::printf("%s\n", json{{"valid", true},
                             {"name", spec->name},
                             {"op", spec->op},
                             {"backend", std::string(proto::name(spec->backend))},
                             {"dtype", spec->dtype},
                             {"task_id", proto::task_id(*files)},
                             {"correctness_cases", spec->correctness_cases.size()},
                             {"benchmark_cases", spec->benchmark_cases.size()},
                             {"param_space", space}}
                            .dump(2)
                            .c_str());
  } else {
    std::printf(
        "%s: valid task '%s' (op %s, %s, %s): %zu correctness case(s) x %lld seed(s), %zu benchmark case(s), "
        "%zu parameter combination(s)\n",
        dir.c_str(), spec->name.c_str(), spec->op.c_str(), std::string(proto::name(spec->backend)).c_str(),
        spec->dtype.c_str(), spec->correctness_cases.size(), (long long)spec->seeds, spec->benchmark_cases.size(),
        space);
  }
  return 0;
}

}  // namespace kiln::cli
