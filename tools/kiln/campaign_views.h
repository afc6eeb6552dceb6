// How the `kiln` commands fetch campaigns from the scorer and show them: one JSON shape and one table
// for a campaign wherever it appears (submit --wait, status, best, up --demo), and the line that says why
// a campaign's programs were not evaluated.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/messaging/client.h"
#include "kiln/proto/payloads.h"

namespace kiln::cli {

// Every campaign the scorer knows.
Result<std::vector<proto::CampaignInfo>> fetch_campaigns(messaging::Client& client);
// The campaigns named (one query each, so the cost does not grow with the history); those the scorer
// does not know are left out.
Result<std::vector<proto::CampaignInfo>> fetch_campaigns(messaging::Client& client,
                                                         const std::vector<std::string>& ids);
// The running campaigns and the `recent` that ended last (every one when recent is 0), by start time, and
// in `not_listed` how many ended ones that leaves out. The same from a scorer that lists every campaign.
Result<std::vector<proto::CampaignInfo>> fetch_recent_campaigns(messaging::Client& client, int64_t recent,
                                                                int64_t* not_listed);
// Keeps the running campaigns and the `recent` ended last (recent > 0), in their order: how many it drops.
int64_t keep_recent(std::vector<proto::CampaignInfo>& campaigns, int64_t recent);
// One campaign; nullopt when the scorer does not know it.
Result<std::optional<proto::CampaignInfo>> find_campaign(messaging::Client& client, const std::string& campaign_id);
// The line for a campaign id the scorer does not know.
std::string unknown_campaign(const std::string& campaign_id);

nlohmann::json to_json(const proto::CampaignInfo& c);

// "K=V K=V" ("-" for none).
std::string params_string(const std::map<std::string, std::string>& p);
// "B=16,H=4096" ("default" for a case without dims).
std::string case_dims(const std::map<std::string, int64_t>& dims);

// Why a campaign's result is incomplete, in one line: "4 program(s) not evaluated; latest: <cause>"; ""
// when every program it made was evaluated.
std::string campaign_problem(const proto::CampaignInfo& c);

}  // namespace kiln::cli
