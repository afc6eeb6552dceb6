#include "campaign_archives.h"

#include <utility>

namespace kiln::scorer {

Result<std::unique_ptr<archive::Archive>> CampaignArchives::build(const std::string& campaign_id) {
  std::unique_ptr<archive::Archive> built;
  if (options_.archive == "elites")
    built = std::make_unique<archive::EliteArchive>(options_.elites);
  else
    built = std::make_unique<archive::MapElitesArchive>(options_.map_elites);
  KILN_RETURN_IF_ERROR(store_.for_each_scored(campaign_id, [&](const proto::Program& p) { built->add(p); }));
  return built;
}

Result<archive::Archive*> CampaignArchives::get(const std::string& campaign_id) {
  if (auto it = archives_.find(campaign_id); it != archives_.end()) return it->second.get();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<archive::Archive> built, build(campaign_id));
  archive::Archive* raw = built.get();
  archives_[campaign_id] = std::move(built);
  return raw;
}

Result<int64_t> CampaignArchives::cells_filled(const CampaignRow& c) {
  archive::Archive* archive = nullptr;
  std::unique_ptr<archive::Archive> transient;
  if (auto it = archives_.find(c.id); it != archives_.end()) {
    archive = it->second.get();
  } else if (c.state == kRunning) {
    KILN_ASSIGN_OR_RETURN(archive, get(c.id));
  } else {
    KILN_ASSIGN_OR_RETURN(std::optional<int64_t> saved, store_.saved_cells_filled(c.id));
    if (saved) return *saved;
    KILN_ASSIGN_OR_RETURN(transient, build(c.id));
    archive = transient.get();
    // Saved, so the next query reads it: rebuilding an archive analyses every program's code again.
    KILN_RETURN_IF_ERROR(store_.save_cells_filled(c.id, static_cast<int64_t>(archive->cells_filled())));
  }
  return static_cast<int64_t>(archive->cells_filled());
}

void CampaignArchives::release(const std::string& campaign_id) {
  auto it = archives_.find(campaign_id);
  if (it == archives_.end()) return;
  // Not saved (a busy database): the first query about the campaign builds it once and saves it.
  (void)store_.save_cells_filled(campaign_id, static_cast<int64_t>(it->second->cells_filled()));
  archives_.erase(it);
}

size_t CampaignArchives::resident_programs() const {
  size_t n = 0;
  for (const auto& [id, archive] : archives_) n += archive->size();
  return n;
}

}  // namespace kiln::scorer
