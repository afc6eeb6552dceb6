// Asking a proposer directly, as the propose handler does: with the request's package, parsed.
#pragma once

#include <catch2/catch.hpp>

#include <utility>

#include "kiln/llm_bridge/proposer.h"
#include "kiln/task/task.h"

namespace kiln::testing {

inline Result<proto::Candidate> propose(llm_bridge::Proposer& proposer, const proto::ProposalRequest& req) {
  auto spec = task::parse_task(req.files);
  REQUIRE(spec.is_ok());
  return proposer.propose(req, service::TaskPackage{"", req.files, std::move(spec).value()});
}

}  // namespace kiln::testing
