#include "task_specs.h"

#include <utility>

namespace kiln::scorer {

Result<std::shared_ptr<const task::TaskSpec>> TaskSpecs::of(const CampaignRow& c) {
  if (auto it = specs_.find(c.id); it != specs_.end()) return it->second;
  auto spec = task::parse_task(c.files);
  if (!spec.is_ok()) return internal_error("campaign " + c.id + ": stored task package: " + spec.status().message());
  auto kept = std::make_shared<const task::TaskSpec>(std::move(spec).value());
  specs_.emplace(c.id, kept);
  return kept;
}

void TaskSpecs::keep(const std::string& campaign_id, task::TaskSpec spec) {
  specs_[campaign_id] = std::make_shared<const task::TaskSpec>(std::move(spec));
}

}  // namespace kiln::scorer
