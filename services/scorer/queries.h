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

  // One campaign, or every campaign by start time when the query names none (with `recent`, the running
  // ones and the `recent` that ended last, and how many more there are).
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
  // Every campaign id by start time; with recent > 0, the running ones and the `recent` ended last, and
  // how many ended ones that leaves out.
  Result<std::vector<std::string>> campaign_ids(int64_t recent, int64_t* not_listed);
  Result<std::map<std::string, double>> template_results(const std::string& campaign_id, const std::string& code);

  CampaignStore& store_;
  CampaignArchives& archives_;
};

}  // namespace kiln::scorer
