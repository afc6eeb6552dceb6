// `kiln status`, `kiln best` and `kiln cancel`: what the broker and the scorer know of the work and its
// campaigns, and how a campaign is stopped.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "campaign_views.h"
#include "commands.h"
#include "kiln/core/time.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/ids.h"

namespace kiln::cli {

using nlohmann::json;

namespace {

constexpr double kCancelTimeoutS = 30;  // the scorer answers a cancel as soon as it is free

json queues_json(const proto::BrokerStatus& st) {
  json q = json::array();
  for (const auto& s : st.queues)
    q.push_back({{"service", s.service},
                 {"queued", s.queued},
                 {"leased", s.leased},
                 {"done", s.done},
                 {"failed", s.failed},
                 {"dead", s.dead},
                 {"workers", s.workers},
                 {"waiting_for_device", s.waiting_for_device}});
  return q;
}

json workers_json(const proto::BrokerStatus& st) {
  json w = json::array();
  for (const auto& x : st.workers)
    w.push_back({{"service", x.service},
                 {"worker_id", x.worker_id},
                 {"slots", x.slots},
                 {"in_flight", x.in_flight},
                 {"backend", std::string(proto::word_of(x.caps.backend))},
                 {"gpu", x.caps.gpu_name},
                 {"host", x.caps.host},
                 {"confinement", x.caps.confinement}});
  return w;
}

void print_queues(const proto::BrokerStatus& st) {
  std::printf("%-12s %7s %7s %7s %7s %5s %8s\n", "service", "queued", "leased", "done", "failed", "dead", "workers");
  for (const auto& s : st.queues) {
    std::printf("%-12s %7lld %7lld %7lld %7lld %5lld %8lld%s\n", s.service.c_str(), (long long)s.queued,
                (long long)s.leased, (long long)s.done, (long long)s.failed, (long long)s.dead, (long long)s.workers,
                s.queued > 0 && s.workers == 0 ? "  (waiting: no worker for this service)" : "");
    for (const auto& [device, n] : s.waiting_for_device)
      std::printf("  %lld job(s) of %s wait for a worker on '%s': none is connected (broker.device_wait_s)\n",
                  (long long)n, s.service.c_str(), device.c_str());
  }
  // An evaluation worker that runs candidates unconfined, or refuses to run them, says so here.
  for (const auto& x : st.workers)
    if (!x.caps.confinement.empty() && x.caps.confinement != "confined")
      std::printf("%s %s: %s\n",
                  x.caps.confinement.rfind("UNCONFINED", 0) == 0 ? "WARNING:" : "refusing:", x.worker_id.c_str(),
                  x.caps.confinement.c_str());
}

json program_json(const proto::Program& p) {
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
  return {{"id", p.id},
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
          {"task", {{"task_id", p.task.task_id}, {"name", p.task.name}}}};
}

// "cell 1-0-2, model fake-coder, tokens 100+50" from what the program's proposer and the scorer recorded
// ("" when there is nothing: a tuner's program before it is placed).
std::string provenance(const proto::Program& p) {
  auto meta = [&](const char* key) {
    auto it = p.metadata.find(key);
    return it == p.metadata.end() ? std::string() : it->second;
  };
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (std::string cell = meta("cell"); !cell.empty()) add("cell " + cell);
  if (std::string proposer = meta("proposer"); !proposer.empty()) add("by " + proposer);
  if (std::string model = meta("model"); !model.empty()) add("model " + model);
  std::string prompt = meta("prompt_tokens"), completion = meta("completion_tokens");
  if (!prompt.empty() || !completion.empty())
    add("tokens " + (prompt.empty() ? "0" : prompt) + " prompt + " + (completion.empty() ? "0" : completion) +
        " completion");
  return out;
}

void print_best(const Common& c, const std::string& campaign, const proto::BestPrograms& best) {
  const auto& ci = best.campaign;
  // Programs whose jobs died of faults not their own (the task's reference, the evaluator): no score.
  const std::string not_evaluated =
      ci.not_evaluated > 0 ? ", " + std::to_string(ci.not_evaluated) + " not evaluated" : "";
  std::printf("campaign %s (%s, %s): %lld/%lld scored, %lld correct%s\n", ci.campaign_id.c_str(), ci.task_name.c_str(),
              ci.state.c_str(), (long long)ci.scored, (long long)(ci.budget + 1), (long long)ci.correct,
              not_evaluated.c_str());
  if (!ci.stop_reason.empty()) std::printf("  stopped: %s\n", ci.stop_reason.c_str());
  if (std::string problem = campaign_problem(ci); !problem.empty()) std::printf("  %s\n", problem.c_str());
  if (ci.prompt_tokens > 0 || ci.completion_tokens > 0)
    std::printf("  tokens: %lld prompt, %lld completion\n", (long long)ci.prompt_tokens,
                (long long)ci.completion_tokens);
  for (const auto& k : ci.promoted) std::printf("  promoted: %s\n", k.c_str());
  for (const auto& n : ci.promotion_notes) std::printf("  note: %s\n", n.c_str());
  bool several_cases = false;
  for (const auto& p : best.programs) several_cases = several_cases || p.eval.cases.size() > 1;
  if (several_cases)
    std::printf("\nruntime and speedup are geometric means over the benchmark cases listed under each program\n");
  std::printf("\n%-4s %-22s %-15s %-8s %-10s %-8s %-28s %s\n", "rank", "program", "verdict", "score", "runtime",
              "speedup", "params", "parent");
  int rank = 1;
  for (const auto& p : best.programs) {
    char rt[32];
    std::snprintf(rt, sizeof rt, "%.4f ms", p.eval.runtime);
    char sp[32];
    std::snprintf(sp, sizeof sp, "%.2fx", p.eval.runtime_improvement);
    std::printf("%-4d %-22s %-15s %-8.3f %-10s %-8s %-28s %s\n", rank++, p.id.c_str(),
                p.eval.status.empty() ? "-" : p.eval.status.c_str(), p.eval.combined_score,
                p.eval.runtime > 0 ? rt : "-", p.eval.runtime_improvement > 0 ? sp : "-",
                params_string(p.template_parameters).c_str(), p.parent_id.empty() ? "-" : p.parent_id.c_str());
    if (std::string from = provenance(p); !from.empty()) std::printf("       %s\n", from.c_str());
    // Each benchmark case under its program: the speedup above is their geometric mean.
    for (const auto& k : p.eval.cases)
      std::printf("       %-36s %s\n", (case_dims(k.dims) + ":").c_str(),
                  format_speedup(k.speedup, k.speedup_lo, k.speedup_hi).c_str());
  }
  if (!best.programs.empty()) std::printf("\nbest program's evaluation:\n%s\n", best.programs[0].eval.eval_log.c_str());
  std::printf("\n%s\n", report_hint(c, campaign).c_str());
}

// Waits for the broker to finish job `job_id`; its RESULT payload, or why it failed.
Result<std::string> job_result(messaging::Client& client, const std::string& job_id, double timeout_s) {
  const double until = monotonic_s() + timeout_s;
  while (true) {
    KILN_ASSIGN_OR_RETURN(std::string body, client.request(std::string(proto::svc::kBroker), "job",
                                                           proto::encode(proto::JobStatusQuery{job_id}), 5.0));
    auto js = proto::decode<proto::JobStatus>(body);
    if (!js.is_ok()) return js.status().with_context("the broker's job status");
    if (js->state == "done") return js->result.data;
    if (js->state == "failed" || js->state == "dead") return unavailable(js->error);
    if (monotonic_s() > until)
      return unavailable("the scorer did not take the request within " + std::to_string(int(timeout_s)) + " s (job " +
                         job_id + " is " + js->state + "; it takes effect when the scorer runs it)");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

int cmd_status(const Common& c, const StatusOptions& o) {
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  auto body = client.request("broker", "status", "", 5.0);
  if (!body.is_ok()) return fail(body.status().message());
  auto st = proto::decode<proto::BrokerStatus>(*body);
  if (!st.is_ok()) return fail("bad status reply: " + st.status().message());
  int64_t not_listed = 0;
  Result<std::vector<proto::CampaignInfo>> campaigns =
      !o.campaign.empty() ? fetch_campaigns(client, {o.campaign})
                          : fetch_recent_campaigns(client, o.all ? 0 : o.recent, &not_listed);
  if (!o.campaign.empty() && campaigns.is_ok() && campaigns->empty()) return fail(unknown_campaign(o.campaign));
  const std::vector<proto::CampaignInfo> none;
  const std::vector<proto::CampaignInfo>& shown = campaigns.is_ok() ? *campaigns : none;
  if (c.json) {
    json cs = json::array();
    for (const auto& info : shown) cs.push_back(to_json(info));
    json out{{"queues", queues_json(*st)},
             {"workers", workers_json(*st)},
             {"campaigns", cs},
             {"campaigns_not_listed", not_listed},
             {"rejected_frames", st->rejected_frames}};
    if (!campaigns.is_ok()) out["campaigns_error"] = campaigns.status().message();
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  print_queues(*st);
  if (!campaigns.is_ok()) {
    std::printf("\ncampaigns: unavailable (%s)\n", campaigns.status().message().c_str());
    return 0;
  }
  if (!shown.empty()) print_results_table(shown);
  if (not_listed > 0)
    std::printf("%lld older campaign(s) not listed: kiln status --all, or kiln status CAMPAIGN\n\n",
                static_cast<long long>(not_listed));
  if (!shown.empty())
    std::printf("%s\n", report_hint(c, o.campaign.empty() ? std::string("<campaign>") : o.campaign).c_str());
  return 0;
}

int cmd_best(const Common& c, const std::string& campaign, int top) {
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  auto known = find_campaign(client, campaign);
  if (!known.is_ok()) return fail(known.status().message());
  if (!*known) return fail(unknown_campaign(campaign));
  auto body =
      client.request(std::string(proto::svc::kScore), "best", proto::encode(proto::CampaignQuery{campaign, top}), 5.0);
  if (!body.is_ok()) return fail(body.status().message());
  auto best = proto::decode<proto::BestPrograms>(*body);
  if (!best.is_ok()) return fail("bad reply: " + best.status().message());
  if (c.json) {
    json progs = json::array();
    for (const auto& p : best->programs) progs.push_back(program_json(p));
    std::printf("%s\n", json{{"campaign", to_json(best->campaign)}, {"programs", progs}}.dump(2).c_str());
    return 0;
  }
  print_best(c, campaign, *best);
  return 0;
}

int cmd_cancel(const Common& c, const std::string& campaign) {
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  auto known = find_campaign(client, campaign);
  if (!known.is_ok()) return fail(known.status().message());
  if (!*known) return fail(unknown_campaign(campaign));
  proto::CampaignInfo info = **known;
  if (info.state == "running") {
    proto::CampaignCancel cancel;
    cancel.campaign_id = campaign;
    const std::string job = proto::job_id::campaign_cancel(campaign);
    proto::Submit sub{std::string(proto::svc::kScore), job, proto::Bytes{proto::encode(cancel)}, 0};
    auto ack = client.submit(sub, 10.0);
    if (!ack.is_ok()) return fail(ack.status().message());
    if (!ack->accepted) return fail("the broker refused the cancel: " + ack->error);
    auto answer = job_result(client, job, kCancelTimeoutS);
    if (!answer.is_ok()) return fail("cancel " + campaign + ": " + answer.status().message());
    auto after = proto::decode<proto::CampaignInfo>(*answer);
    if (!after.is_ok()) return fail("cancel " + campaign + ": bad answer: " + after.status().message());
    info = std::move(after).value();
  }
  if (c.json) {
    std::printf("%s\n", to_json(info).dump(2).c_str());
  } else if (info.state == "done" && info.stop_reason != "cancelled") {
    std::printf("campaign %s was done already: nothing to cancel\n", campaign.c_str());
  } else if (info.state == "done") {
    std::printf("campaign %s cancelled: done, %lld program(s) scored\n", campaign.c_str(), (long long)info.scored);
  } else {
    std::printf("campaign %s cancelled: no new proposals; the %lld in flight finish and are scored first\n",
                campaign.c_str(), (long long)info.in_flight);
  }
  return 0;
}

}  // namespace kiln::cli
