#include "campaign_archives.h"

#include <utility>

namespace kiln::scorer {

Result<archive::Archive*> CampaignArchives::get(const std::string& campaign_id) {
  if (auto it = archives_.find(campaign_id); it != archives_.end()) return it->second.get();
  std::unique_ptr<archive::Archive> built;
  if (options_.archive == "elites")
    built = std::make_unique<archive::EliteArchive>(options_.elites);
  else
    built = std::make_unique<archive::MapElitesArchive>(options_.map_elites);
  KILN_RETURN_IF_ERROR(store_.for_each_scored(campaign_id, [&](const proto::Program& p) { built->add(p); }));
  archive::Archive* raw = built.get();
  archives_[campaign_id] = std::move(built);
  return raw;
}

}  // namespace kiln::scorer
