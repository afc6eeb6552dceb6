// Each running campaign's archive (kiln/archive/archive.h) in memory, rebuilt from the programs table in
// scoring order on first use, so a restarted scorer makes the same choices it would have made. A campaign
// that ended leaves memory (release): what is resident grows with the campaigns running, not with history;
// a query about an ended campaign builds its archive for the answer and drops it.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "campaign_store.h"
#include "kiln/archive/archive.h"
#include "kiln/core/status.h"
#include "kiln/scorer/engine.h"

namespace kiln::scorer {

class CampaignArchives {
 public:
  CampaignArchives(CampaignStore& store, const EngineOptions& options) : store_(store), options_(options) {}

  // The campaign's archive, valid until clear().
  Result<archive::Archive*> get(const std::string& campaign_id);
  // Dropped whenever a transaction fails, so the in-memory view never runs ahead of what was committed.
  void clear() { archives_.clear(); }
  // Drops one campaign's archive (it ended), saving what queries read of it.
  void release(const std::string& campaign_id);
  bool holds(const std::string& campaign_id) const { return archives_.count(campaign_id) > 0; }
  // The cells a campaign's archive fills: from memory while it runs, else as saved when it ended (an
  // archive of an older scorer is built once for it, and the figure saved).
  Result<int64_t> cells_filled(const CampaignRow& c);
  // Resident archives, and the programs they hold.
  size_t resident() const { return archives_.size(); }
  size_t resident_programs() const;

 private:
  CampaignStore& store_;
  const EngineOptions& options_;
  Result<std::unique_ptr<archive::Archive>> build(const std::string& campaign_id);

  std::map<std::string, std::unique_ptr<archive::Archive>> archives_;
};

}  // namespace kiln::scorer
