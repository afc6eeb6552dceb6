// Each campaign's task package, parsed once per process. The scorer reads the spec for every result (the
// editable regions the code must keep to) and every promotion (op, dtype, shape); a campaign's files never
// change once it has started, so the spec parsed at the start serves them all.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "campaign_store.h"
#include "kiln/core/status.h"
#include "kiln/task/task.h"

namespace kiln::scorer {

class TaskSpecs {
 public:
  // The spec of `c`'s package, parsed on first use. The start validated the package, so a failure here
  // means the archive holds files it never accepted (kInternal).
  Result<std::shared_ptr<const task::TaskSpec>> of(const CampaignRow& c);
  // Keeps the spec a campaign's start parsed.
  void keep(const std::string& campaign_id, task::TaskSpec spec);
  // Dropped whenever a transaction fails: a start that rolled back may come again with other files.
  void clear() { specs_.clear(); }
  // Drops one campaign's spec (it ended; a late job parses it again).
  void release(const std::string& campaign_id) { specs_.erase(campaign_id); }
  bool holds(const std::string& campaign_id) const { return specs_.count(campaign_id) > 0; }
  size_t resident() const { return specs_.size(); }

 private:
  std::map<std::string, std::shared_ptr<const task::TaskSpec>> specs_;  // by campaign id
};

}  // namespace kiln::scorer
