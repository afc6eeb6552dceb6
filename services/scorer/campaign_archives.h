// Each campaign's archive (kiln/archive/archive.h) in memory, rebuilt from the programs table in scoring
// order on first use, so a restarted scorer makes the same choices it would have made.
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

 private:
  CampaignStore& store_;
  const EngineOptions& options_;
  std::map<std::string, std::unique_ptr<archive::Archive>> archives_;
};

}  // namespace kiln::scorer
