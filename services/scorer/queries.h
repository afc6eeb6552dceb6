// Queries (`kiln status`, `kiln best`, the report page and the best-speedup gauge): read-only views of
// the archive, assembled from the stored rows and the campaigns' in-memory archives.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "campaign_archives.h"
#include "campaign_store.h"
#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"

namespace kiln::scorer {

class Queries {
 public:
  Queries(CampaignStore& store, CampaignArchives& archives) : store_(store), archives_(archives) {}

  // One campaign, or every campaign by start time when the query names none.
  Result<proto::CampaignList> campaigns(const proto::CampaignQuery& query);
  Result<proto::CampaignInfo> campaign(const std::string& campaign_id);  // kNotFound if unknown
  Result<proto::BestPrograms> best(const proto::CampaignQuery& query);   // kNotFound if unknown

  // A campaign's progress, best program and promotions (also the answer to its campaign.start).
  Result<proto::CampaignInfo> campaign_info(const CampaignRow& c);
  // The `top` best scored programs (5 when not positive), best first, each with its lineage, its
  // strategy's lineage and, when templated, every parameter set tried with its code.
  Result<proto::BestPrograms> best_programs(const CampaignRow& c, int64_t top);

  Result<std::map<std::string, double>> best_speedup_by_task();
  Result<int64_t> duplicates_ignored();

 private:
  Result<std::vector<std::string>> campaign_ids();
  Result<std::map<std::string, double>> template_results(const std::string& campaign_id, const std::string& code);

  CampaignStore& store_;
  CampaignArchives& archives_;
};

}  // namespace kiln::scorer
