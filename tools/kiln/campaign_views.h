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
