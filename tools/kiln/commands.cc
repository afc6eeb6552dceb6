#include "commands.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/core/time.h"
#include "kiln/messaging/client.h"
#include "kiln/messaging/endpoint.h"
#include "kiln/proto/ids.h"
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

namespace {

json to_json(const proto::CampaignInfo& c) {
  return json{{"campaign_id", c.campaign_id},
              {"task", c.task_name},
              {"task_id", c.task_id},
              {"backend", c.backend},
              {"state", c.state},
              {"budget", c.budget},
              {"proposed", c.proposed},
              {"scored", c.scored},
              {"correct", c.correct},
              {"in_flight", c.in_flight},
              {"best_program_id", c.best_program_id},
              {"best_score", c.best_score},
              {"best_speedup", c.best_speedup},
              {"best_speedup_interval", {c.best_speedup_lo, c.best_speedup_hi}},
              {"best_params", c.best_params},
              {"promoted", c.promoted},
              {"promotion_notes", c.promotion_notes},
              {"started_at", c.started_at},
              {"finished_at", c.finished_at},
              {"proposer", c.proposer},
              {"stop_reason", c.stop_reason},
              {"cells_filled", c.cells_filled},
              {"prompt_tokens", c.prompt_tokens},
              {"completion_tokens", c.completion_tokens},
              {"not_evaluated", c.not_evaluated}};
}

std::string params_string(const std::map<std::string, std::string>& p) {
  std::string s;
  for (const auto& [k, v] : p) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s.empty() ? "-" : s;
}

// "B=16,H=4096" ("default" for a case without dims).
std::string case_dims(const std::map<std::string, int64_t>& dims) {
  std::string s;
  for (const auto& [k, v] : dims) s += (s.empty() ? "" : ",") + k + "=" + std::to_string(v);
  return s.empty() ? "default" : s;
}

Result<std::vector<proto::CampaignInfo>> fetch_campaigns(messaging::Client& client) {
  auto body = client.request(std::string(proto::svc::kScore), "campaigns", proto::encode(proto::CampaignQuery{}), 5.0);
  if (!body.is_ok()) return body.status();
  auto list = proto::decode<proto::CampaignList>(*body);
  if (!list.is_ok()) return list.status();
  return list->campaigns;
}

}  // namespace

std::string format_speedup(double s, double lo, double hi) {
  if (s <= 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2fx [%.2f, %.2f]", s, lo, hi);
  return buf;
}

void print_results_table(const std::vector<proto::CampaignInfo>& campaigns) {
  std::printf("\n%-10s %-8s %-9s %-24s %-28s %s\n", "task", "state", "programs", "best speedup [95% CI]", "params",
              "registry");
  for (const auto& c : campaigns) {
    std::string reg = c.promoted.empty()
                          ? (c.promotion_notes.empty() ? "-" : "not promoted: " + c.promotion_notes.back())
                          : c.promoted.back();
    std::printf("%-10s %-8s %4lld/%-4lld %-24s %-28s %s\n", c.task_name.c_str(), c.state.c_str(),
                static_cast<long long>(c.scored), static_cast<long long>(c.budget + 1),
                format_speedup(c.best_speedup, c.best_speedup_lo, c.best_speedup_hi).c_str(),
                params_string(c.best_params).c_str(), reg.c_str());
  }
  std::printf("\n");
}

Result<std::string> submit_task(const Common& c, const SubmitOptions& o) {
  if (!o.campaign_id.empty() && !proto::is_campaign_id(o.campaign_id)) {
    return invalid_argument("--campaign-id: expected 1-" + std::to_string(proto::kMaxCampaignIdChars) +
                            " characters of [A-Za-z0-9_.-], got \"" + o.campaign_id + "\"");
  }
  auto files = task::load_package(o.dir);
  if (!files.is_ok()) return files.status().with_context(o.dir);
  auto spec = task::parse_task(*files);
  if (!spec.is_ok()) return spec.status().with_context(o.dir);
  std::string tid = task::task_id(*files);
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
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  proto::Submit sub{std::string(proto::svc::kIngest), proto::job_id::ingest(cid), proto::Bytes{proto::encode(req)}, 0};
  auto ack = client.submit(sub, 10.0);
  if (!ack.is_ok()) return ack.status();
  if (!ack->accepted) return invalid_argument("broker refused the submission: " + ack->error);
  return cid;
}

int wait_for_campaigns(const Common& c, const std::vector<std::string>& ids, double timeout_s, bool quiet,
                       const std::function<bool()>& tick) {
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  double start = monotonic_s();
  bool tty = ::isatty(2);
  std::string last_line;
  while (true) {
    // An ingest failure (a package the ingest service refused) ends the wait with its reason.
    for (const auto& id : ids) {
      auto body = client.request("broker", "job", proto::encode(proto::JobStatusQuery{proto::job_id::ingest(id)}), 5.0);
      if (body.is_ok()) {
        auto js = proto::decode<proto::JobStatus>(*body);
        if (js.is_ok() && (js->state == "failed" || js->state == "dead")) {
          if (tty && !quiet) std::fprintf(stderr, "\n");
          return fail("campaign " + id + " was refused: " + js->error);
        }
      }
    }
    auto all = fetch_campaigns(client);
    size_t done = 0;
    std::string line;
    if (all.is_ok()) {
      for (const auto& id : ids) {
        for (const auto& info : *all) {
          if (info.campaign_id != id) continue;
          if (info.state == "done") ++done;
          int width = 20;
          int64_t total = info.budget + 1;
          int filled = total > 0 ? static_cast<int>(width * info.scored / total) : 0;
          char buf[256];
          std::snprintf(buf, sizeof buf, "%s [%s%s] %lld/%lld best %s  ", info.task_name.c_str(),
                        std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                        static_cast<long long>(info.scored), static_cast<long long>(total),
                        info.best_speedup > 0 ? (std::to_string(info.best_speedup).substr(0, 4) + "x").c_str() : "-");
          line += buf;
        }
      }
    } else {
      line = "waiting for the scorer: " + all.status().message();
    }
    if (!quiet && line != last_line) {
      if (tty)
        std::fprintf(stderr, "\r%s", line.c_str());
      else
        std::fprintf(stderr, "%s\n", line.c_str());
      last_line = line;
    }
    if (all.is_ok() && done == ids.size()) {
      if (tty && !quiet) std::fprintf(stderr, "\n");
      return 0;
    }
    if (timeout_s > 0 && monotonic_s() - start > timeout_s) {
      if (tty && !quiet) std::fprintf(stderr, "\n");
      return fail("campaigns not finished after " + std::to_string(static_cast<int>(timeout_s)) + " s");
    }
    for (int i = 0; i < 5; ++i) {
      if (tick && !tick()) {
        if (tty && !quiet) std::fprintf(stderr, "\n");
        return fail("interrupted");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

int cmd_submit(const Common& c, const SubmitOptions& o) {
  if (o.proposer != "tuner" && o.proposer != "llm" && o.proposer != "external")
    return fail("--proposer must be tuner, llm or external");
  auto cid = submit_task(c, o);
  if (!cid.is_ok()) return fail(cid.status().message());
  if (!o.wait) {
    if (c.json)
      std::printf("%s\n", json{{"campaign_id", *cid}}.dump().c_str());
    else
      std::printf("submitted campaign %s\n", cid->c_str());
    return 0;
  }
  if (!c.json) std::printf("submitted campaign %s\n", cid->c_str());
  int rc = wait_for_campaigns(c, {*cid}, o.timeout_s, c.json);
  if (rc != 0) return rc;
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  auto all = fetch_campaigns(client);
  if (!all.is_ok()) return fail(all.status().message());
  std::vector<proto::CampaignInfo> mine;
  for (auto& info : *all)
    if (info.campaign_id == *cid) mine.push_back(info);
  if (c.json) {
    json out = json::array();
    for (auto& m : mine) out.push_back(to_json(m));
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    print_results_table(mine);
  }
  return 0;
}

int cmd_status(const Common& c, const std::string& campaign) {
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  auto body = client.request("broker", "status", "", 5.0);
  if (!body.is_ok()) return fail(body.status().message());
  auto st = proto::decode<proto::BrokerStatus>(*body);
  if (!st.is_ok()) return fail("bad status reply: " + st.status().message());
  auto campaigns = fetch_campaigns(client);
  std::vector<proto::CampaignInfo> shown;
  if (campaigns.is_ok())
    for (auto& info : *campaigns)
      if (campaign.empty() || info.campaign_id == campaign) shown.push_back(info);
  if (!campaign.empty() && shown.empty()) return fail("no campaign '" + campaign + "'");
  if (c.json) {
    json q = json::array(), w = json::array(), cs = json::array();
    for (const auto& s : st->queues)
      q.push_back({{"service", s.service},
                   {"queued", s.queued},
                   {"leased", s.leased},
                   {"done", s.done},
                   {"failed", s.failed},
                   {"dead", s.dead},
                   {"workers", s.workers}});
    for (const auto& x : st->workers)
      w.push_back({{"service", x.service},
                   {"worker_id", x.worker_id},
                   {"slots", x.slots},
                   {"in_flight", x.in_flight},
                   {"backend", x.caps.backend},
                   {"gpu", x.caps.gpu_name},
                   {"host", x.caps.host},
                   {"confinement", x.caps.confinement}});
    for (const auto& info : shown) cs.push_back(to_json(info));
    json out{{"queues", q}, {"workers", w}, {"campaigns", cs}, {"rejected_frames", st->rejected_frames}};
    if (!campaigns.is_ok()) out["campaigns_error"] = campaigns.status().message();
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-12s %7s %7s %7s %7s %5s %8s\n", "service", "queued", "leased", "done", "failed", "dead", "workers");
  for (const auto& s : st->queues) {
    std::printf("%-12s %7lld %7lld %7lld %7lld %5lld %8lld%s\n", s.service.c_str(), (long long)s.queued,
                (long long)s.leased, (long long)s.done, (long long)s.failed, (long long)s.dead, (long long)s.workers,
                s.queued > 0 && s.workers == 0 ? "  (waiting: no worker for this service)" : "");
  }
  // An evaluation worker that runs candidates unconfined, or refuses to run them, says so here.
  for (const auto& x : st->workers)
    if (!x.caps.confinement.empty() && x.caps.confinement != "confined")
      std::printf("%s %s: %s\n",
                  x.caps.confinement.rfind("UNCONFINED", 0) == 0 ? "WARNING:" : "refusing:", x.worker_id.c_str(),
                  x.caps.confinement.c_str());
  if (!campaigns.is_ok()) {
    std::printf("\ncampaigns: unavailable (%s)\n", campaigns.status().message().c_str());
  } else if (!shown.empty()) {
    std::printf("\n%-26s", "campaign");
    print_results_table(shown);
    std::printf("\n%s\n", report_hint(c, campaign.empty() ? std::string("<campaign>") : campaign).c_str());
  }
  return 0;
}

int cmd_best(const Common& c, const std::string& campaign, int top) {
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  auto body =
      client.request(std::string(proto::svc::kScore), "best", proto::encode(proto::CampaignQuery{campaign, top}), 5.0);
  if (!body.is_ok()) return fail(body.status().message());
  auto best = proto::decode<proto::BestPrograms>(*body);
  if (!best.is_ok()) return fail("bad reply: " + best.status().message());
  if (c.json) {
    json progs = json::array();
    for (const auto& p : best->programs) {
      json cases = json::array();
      for (const auto& k : p.eval.cases) {
        json baselines = json::array();
        for (const auto& b : k.baselines)
          baselines.push_back({{"name", b.name},
                               {"median_us", b.stats.median_us},
                               {"speedup", b.speedup},
                               {"speedup_interval", {b.speedup_lo, b.speedup_hi}}});
        cases.push_back({{"dims", k.dims},
                         {"speedup", k.speedup},
                         {"speedup_interval", {k.speedup_lo, k.speedup_hi}},
                         {"median_us", k.median_us},
                         {"reference_median_us", k.reference_median_us},
                         {"n", k.n},
                         {"baselines", baselines}});
      }
      auto stat = [&](const char* key) {
        auto it = p.eval.runtime_stats.find(key);
        return it == p.eval.runtime_stats.end() ? -1.0 : it->second;
      };
      progs.push_back({{"id", p.id},
                       {"parent_id", p.parent_id},
                       {"generation", p.generation},
                       {"params", p.template_parameters},
                       {"perf_score", p.eval.perf_score},
                       {"combined_score", p.eval.combined_score},
                       {"runtime_ms", p.eval.runtime},
                       {"speedup", p.eval.runtime_improvement},
                       {"speedup_interval", {stat("speedup_lo"), stat("speedup_hi")}},
                       {"cases", cases},
                       {"status", p.eval.status},
                       {"eval_log", p.eval.eval_log},
                       {"metadata", p.metadata},
                       {"eval_metadata", p.eval.metadata},
                       {"profiler_data", p.eval.profiler_data},
                       {"template_results", p.eval.template_results},
                       {"complexity", p.complexity},
                       {"diversity", p.diversity},
                       {"task", {{"task_id", p.task.task_id}, {"name", p.task.name}}}});
    }
    std::printf("%s\n", json{{"campaign", to_json(best->campaign)}, {"programs", progs}}.dump(2).c_str());
    return 0;
  }
  const auto& ci = best->campaign;
  // Programs whose jobs died of faults not their own (the task's reference, the evaluator): no score.
  const std::string not_evaluated =
      ci.not_evaluated > 0 ? ", " + std::to_string(ci.not_evaluated) + " not evaluated" : "";
  std::printf("campaign %s (%s, %s): %lld/%lld scored, %lld correct%s\n", ci.campaign_id.c_str(), ci.task_name.c_str(),
              ci.state.c_str(), (long long)ci.scored, (long long)(ci.budget + 1), (long long)ci.correct,
              not_evaluated.c_str());
  for (const auto& k : ci.promoted) std::printf("  promoted: %s\n", k.c_str());
  for (const auto& n : ci.promotion_notes) std::printf("  note: %s\n", n.c_str());
  bool several_cases = false;
  for (const auto& p : best->programs) several_cases = several_cases || p.eval.cases.size() > 1;
  if (several_cases)
    std::printf("\nruntime and speedup are geometric means over the benchmark cases listed under each program\n");
  std::printf("\n%-4s %-22s %-8s %-10s %-12s %-28s %s\n", "rank", "program", "score", "runtime", "speedup", "params",
              "parent");
  int rank = 1;
  for (const auto& p : best->programs) {
    char rt[32];
    std::snprintf(rt, sizeof rt, "%.4f ms", p.eval.runtime);
    char sp[32];
    std::snprintf(sp, sizeof sp, "%.2fx", p.eval.runtime_improvement);
    std::printf("%-4d %-22s %-8.3f %-10s %-12s %-28s %s\n", rank++, p.id.c_str(), p.eval.combined_score,
                p.eval.runtime > 0 ? rt : "-", p.eval.runtime_improvement > 0 ? sp : "-",
                params_string(p.template_parameters).c_str(), p.parent_id.empty() ? "-" : p.parent_id.c_str());
    // Each benchmark case under its program: the speedup above is their geometric mean.
    for (const auto& k : p.eval.cases)
      std::printf("       %-36s %s\n", (case_dims(k.dims) + ":").c_str(),
                  format_speedup(k.speedup, k.speedup_lo, k.speedup_hi).c_str());
  }
  if (!best->programs.empty())
    std::printf("\nbest program's evaluation:\n%s\n", best->programs[0].eval.eval_log.c_str());
  std::printf("\n%s\n", report_hint(c, campaign).c_str());
  return 0;
}

int cmd_task_validate(const Common& c, const std::string& dir) {
  auto files = task::load_package(dir);
  if (!files.is_ok()) {
    if (c.json) std::printf("%s\n", json{{"valid", false}, {"error", files.status().message()}}.dump().c_str());
    return fail(dir + ": " + files.status().message());
  }
  auto spec = task::parse_task(*files);
  if (!spec.is_ok()) {
    if (c.json) std::printf("%s\n", json{{"valid", false}, {"error", spec.status().message()}}.dump().c_str());
    return fail(dir + ": " + spec.status().message());
  }
  size_t space = 1;
  for (const auto& [k, v] : spec->params) space *= v.size();
  if (c.json) {
    std::printf("%s\n", json{{"valid", true},
                             {"name", spec->name},
                             {"op", spec->op},
                             {"backend", std::string(proto::name(spec->backend))},
                             {"dtype", spec->dtype},
                             {"task_id", task::task_id(*files)},
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
