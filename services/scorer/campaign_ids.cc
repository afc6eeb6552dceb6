#include "kiln/scorer/campaign_ids.h"

#include "kiln/proto/payloads.h"

namespace kiln::scorer {

std::string program_id_for(std::string_view campaign_id, int64_t index) {
  return std::string(campaign_id) + "/p" + std::to_string(index);
}

std::string campaign_of(std::string_view program_id) {
  size_t pos = program_id.rfind("/p");
  if (pos == std::string_view::npos || pos == 0) return {};
  return std::string(program_id.substr(0, pos));
}

std::string_view proposal_service_for(std::string_view name) {
  return name == proposer::kExternal ? proto::svc::kProposeExternal : proto::svc::kPropose;
}

}  // namespace kiln::scorer
