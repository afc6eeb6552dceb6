#include "campaign_views.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "commands.h"
#include "kiln/proto/codec.h"

namespace kiln::cli {

using nlohmann::json;

namespace {

constexpr size_t kMaxProblemChars = 300;  // one terminal line or two, not a compiler log

// The first line of `text`, at most kMaxProblemChars.
std::string one_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > kMaxProblemChars) line = line.substr(0, kMaxProblemChars) + "...";
  return line;
}

Result<proto::CampaignList> query_campaigns(messaging::Client& client, const std::string& campaign_id,
                                            int64_t recent = 0) {
  proto::CampaignQuery query;
  query.campaign_id = campaign_id;
  query.recent = recent;
  KILN_ASSIGN_OR_RETURN(std::string body,
                        client.request(std::string(proto::svc::kScore), "campaigns", proto::encode(query), 5.0));
  auto list = proto::decode<proto::CampaignList>(body);
  if (!list.is_ok()) return list.status().with_context("the scorer's campaign list");
  return std::move(list).value();
}

}  // namespace

Result<std::vector<proto::CampaignInfo>> fetch_campaigns(messaging::Client& client) {
  KILN_ASSIGN_OR_RETURN(proto::CampaignList list, query_campaigns(client, ""));
  return std::move(list.campaigns);
}

Result<std::vector<proto::CampaignInfo>> fetch_campaigns(messaging::Client& client,
                                                         const std::vector<std::string>& ids) {
  std::vector<proto::CampaignInfo> out;
  for (const auto& id : ids) {
    KILN_ASSIGN_OR_RETURN(std::optional<proto::CampaignInfo> info, find_campaign(client, id));
    if (info) out.push_back(std::move(*info));
  }
  return out;
}

Result<std::vector<proto::CampaignInfo>> fetch_recent_campaigns(messaging::Client& client, int64_t recent,
                                                                int64_t* not_listed) {
  KILN_ASSIGN_OR_RETURN(proto::CampaignList list, query_campaigns(client, "", recent));
  *not_listed = list.not_listed + keep_recent(list.campaigns, recent);
  return std::move(list.campaigns);
}

int64_t keep_recent(std::vector<proto::CampaignInfo>& campaigns, int64_t recent) {
  if (recent <= 0) return 0;
  std::vector<const proto::CampaignInfo*> ended;
  for (const auto& c : campaigns)
    if (c.state != "running") ended.push_back(&c);
  if (static_cast<int64_t>(ended.size()) <= recent) return 0;
  // The newest `recent` by end time stay; the rest go.
  std::stable_sort(ended.begin(), ended.end(),
                   [](const auto* a, const auto* b) { return a->finished_at > b->finished_at; });
  std::set<std::string> dropped;
  for (size_t i = static_cast<size_t>(recent); i < ended.size(); ++i) dropped.insert(ended[i]->campaign_id);
  std::erase_if(campaigns, [&](const proto::CampaignInfo& c) { return dropped.count(c.campaign_id) > 0; });
  return static_cast<int64_t>(dropped.size());
}

// The scorer lists only campaigns it knows, so an unknown id is an empty list, not an error to parse.
Result<std::optional<proto::CampaignInfo>> find_campaign(messaging::Client& client, const std::string& campaign_id) {
  KILN_ASSIGN_OR_RETURN(proto::CampaignList list, query_campaigns(client, campaign_id));
  for (auto& info : list.campaigns)
    if (info.campaign_id == campaign_id) return std::optional<proto::CampaignInfo>(std::move(info));
  return std::optional<proto::CampaignInfo>();
}

std::string unknown_campaign(const std::string& campaign_id) {
  return "no campaign '" + campaign_id + "' (kiln status lists the campaigns)";
}

json to_json(const proto::CampaignInfo& c) {
  return json{{"campaign_id", c.campaign_id},
              {"task", c.task_name},
              {"task_id", c.task_id},
              {"backend", std::string(proto::word_of(c.backend))},
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
              {"not_evaluated", c.not_evaluated},
              {"last_not_evaluated", c.last_not_evaluated},
              {"problem", campaign_problem(c)}};
}

std::string params_string(const std::map<std::string, std::string>& p) {
  std::string s;
  for (const auto& [k, v] : p) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s.empty() ? "-" : s;
}

std::string case_dims(const std::map<std::string, int64_t>& dims) {
  std::string s;
  for (const auto& [k, v] : dims) s += (s.empty() ? "" : ",") + k + "=" + std::to_string(v);
  return s.empty() ? "default" : s;
}

std::string campaign_problem(const proto::CampaignInfo& c) {
  if (c.not_evaluated <= 0) return "";
  std::string cause = c.last_not_evaluated;
  const std::string prefix = "not evaluated: ";
  if (cause.rfind(prefix, 0) == 0) cause = cause.substr(prefix.size());
  std::string line = std::to_string(c.not_evaluated) + " program(s) not evaluated";
  if (!cause.empty()) line += "; latest: " + one_line(cause);
  return line;
}

std::string format_speedup(double s, double lo, double hi) {
  if (s <= 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2fx [%.2f, %.2f]", s, lo, hi);
  return buf;
}

void print_results_table(const std::vector<proto::CampaignInfo>& campaigns) {
  std::printf("\n%-28s %-10s %-8s %-9s %-24s %-28s %s\n", "campaign", "task", "state", "programs",
              "best speedup [95% CI]", "params", "registry");
  for (const auto& c : campaigns) {
    std::string reg = c.promoted.empty()
                          ? (c.promotion_notes.empty() ? "-" : "not promoted: " + c.promotion_notes.back())
                          : c.promoted.back();
    std::printf("%-28s %-10s %-8s %4lld/%-4lld %-24s %-28s %s\n", c.campaign_id.c_str(), c.task_name.c_str(),
                c.state.c_str(), static_cast<long long>(c.scored), static_cast<long long>(c.budget + 1),
                format_speedup(c.best_speedup, c.best_speedup_lo, c.best_speedup_hi).c_str(),
                params_string(c.best_params).c_str(), reg.c_str());
  }
  // What a row cannot say: why a campaign stopped early, and why programs of it have no score.
  for (const auto& c : campaigns) {
    if (!c.stop_reason.empty()) std::printf("  %s: stopped: %s\n", c.campaign_id.c_str(), c.stop_reason.c_str());
    if (std::string problem = campaign_problem(c); !problem.empty())
      std::printf("  %s: %s\n", c.campaign_id.c_str(), problem.c_str());
  }
  std::printf("\n");
}

}  // namespace kiln::cli
