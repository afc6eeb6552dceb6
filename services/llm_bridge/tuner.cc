#include "kiln/llm_bridge/proposer.h"

#include <algorithm>
#include <numeric>

#include "kiln/core/random.h"
#include "kiln/task/task.h"

namespace kiln::llm_bridge {

namespace {

// Up to this many untried combinations the permutation is a full Fisher-Yates shuffle (a few µs per
// proposal); beyond it an affine bijection i -> a*i + b (mod n) avoids materializing the space.
constexpr uint64_t kShuffleLimit = 4096;

__extension__ typedef unsigned __int128 Uint128;  // a*k + b must not overflow before the modulo

std::string campaign_of(const proto::ProposalRequest& req) {
  if (!req.parent.campaign_id.empty()) return req.parent.campaign_id;
  size_t pos = req.program_id.rfind("/p");
  return pos == std::string::npos ? req.program_id : req.program_id.substr(0, pos);
}

}  // namespace

Result<ParamSpace> ParamSpace::make(std::vector<std::pair<std::string, std::vector<std::string>>> params) {
  ParamSpace space;
  for (const auto& [name, values] : params) {
    if (values.empty()) return invalid_argument("parameter " + name + " has no values");
    if (space.size_ > kMaxSize / values.size())
      return resource_exhausted("parameter space too large (over " + std::to_string(kMaxSize) + " combinations)");
    space.size_ *= values.size();
  }
  space.params_ = std::move(params);
  return space;
}

std::map<std::string, std::string> ParamSpace::combination(uint64_t index) const {
  std::map<std::string, std::string> out;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    const auto& values = it->second;
    out[it->first] = values[index % values.size()];
    index /= values.size();
  }
  return out;
}

uint64_t ParamSpace::distance(uint64_t index, const std::map<std::string, std::string>& other) const {
  uint64_t d = 0;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    const auto& values = it->second;
    const uint64_t mine = index % values.size();
    index /= values.size();
    auto o = other.find(it->first);
    auto pos = o == other.end() ? values.end() : std::find(values.begin(), values.end(), o->second);
    if (pos == values.end()) {
      d += 1;
      continue;
    }
    const auto theirs = static_cast<uint64_t>(pos - values.begin());
    d += mine > theirs ? mine - theirs : theirs - mine;
  }
  return d;
}

uint64_t tuner_block_size(uint64_t space_size, int64_t budget) {
  // Larger blocks made the search too local in kiln-bench-tuner (sgemm: 81 combinations, budget 8).
  constexpr uint64_t kMaxBlock = 4;
  if (budget <= 0 || space_size <= 1) return 1;
  const uint64_t per_proposal = (space_size - 1) / static_cast<uint64_t>(budget);
  return std::clamp<uint64_t>(per_proposal, 1, kMaxBlock);
}

Result<std::vector<uint64_t>> tuner_block(uint64_t space_size, uint64_t seed, int64_t proposal, uint64_t block) {
  if (proposal < 1) return invalid_argument("proposal index " + std::to_string(proposal) + ": expected >= 1");
  if (block < 1) block = 1;
  std::vector<uint64_t> out;
  const auto first = static_cast<int64_t>(static_cast<uint64_t>(proposal - 1) * block + 1);
  for (uint64_t j = 0; j < block; ++j) {
    auto index = tuner_combination(space_size, seed, first + static_cast<int64_t>(j));
    if (!index.is_ok()) {
      if (out.empty()) return index.status();
      break;  // the last block may be short
    }
    out.push_back(*index);
  }
  return out;
}

Result<uint64_t> tuner_combination(uint64_t space_size, uint64_t seed, int64_t proposal) {
  if (proposal < 1) return invalid_argument("proposal index " + std::to_string(proposal) + ": expected >= 1");
  // Program 0 holds index 0; proposals draw from the rest.
  const uint64_t untried = space_size > 0 ? space_size - 1 : 0;
  const auto k = static_cast<uint64_t>(proposal - 1);
  if (k >= untried)
    return resource_exhausted("parameter space exhausted (" + std::to_string(space_size) + " combinations, proposal " +
                              std::to_string(proposal) + ")");
  Rng rng(seed);
  if (untried <= kShuffleLimit) {
    std::vector<uint64_t> order(untried);
    std::iota(order.begin(), order.end(), uint64_t{1});
    // Only the first k+1 places are needed: a partial Fisher-Yates fixes them exactly as a full one would.
    for (uint64_t i = 0; i <= k; ++i) std::swap(order[i], order[i + rng.below(untried - i)]);
    return order[k];
  }
  uint64_t a = 1 + rng.below(untried - 1);
  while (std::gcd(a, untried) != 1) a = 1 + rng.below(untried - 1);
  const uint64_t b = rng.below(untried);
  const auto mixed = static_cast<Uint128>(a) * k + b;
  return 1 + static_cast<uint64_t>(mixed % untried);
}

Result<proto::Candidate> TunerProposer::propose(const proto::ProposalRequest& req,
                                                const service::TaskPackage& package) {
  const task::TaskSpec& spec = package.spec;
  KILN_ASSIGN_OR_RETURN(ParamSpace space, ParamSpace::make(spec.params));
  const std::string campaign_id = campaign_of(req);
  const uint64_t block_size = req.tuner_blocks ? tuner_block_size(space.size(), req.budget) : 1;
  KILN_ASSIGN_OR_RETURN(std::vector<uint64_t> block,
                        tuner_block(space.size(), seed_from(campaign_id), req.proposal_index, block_size));
  // Near the parent when it has been measured (it is then the archive's choice of a good program);
  // otherwise the block's first, a uniform random pick.
  uint64_t index = block.front();
  // Every other proposal exploits; the rest sample uniformly, so a poor early parent cannot trap the search.
  const bool parent_measured = !req.parent_eval_log.empty() && !req.parent.params.empty();
  if (parent_measured && req.proposal_index % 2 == 0) {
    uint64_t best = UINT64_MAX;
    for (uint64_t candidate : block) {
      const uint64_t d = space.distance(candidate, req.parent.params);
      if (d < best) {
        best = d;
        index = candidate;
      }
    }
  }

  proto::Candidate cand;
  cand.campaign_id = campaign_id;
  cand.program_id = req.program_id;
  cand.parent_id = req.parent.program_id;
  cand.generation = req.parent.generation + 1;
  cand.proposal_index = req.proposal_index;
  cand.proposer = "tuner";
  // The tuner never edits the region: the code is the parent's (the task's kernel when none was given).
  cand.code = req.parent.code.empty() ? package.files.at(spec.kernel_file).data : req.parent.code;
  cand.params = space.combination(index);
  cand.notes = "tuner:";
  for (const auto& [name, values] : spec.params) cand.notes += " " + name + "=" + cand.params[name];
  if (block.size() > 1)
    cand.notes += " (nearest to " + req.parent.program_id + " of " + std::to_string(block.size()) + ")";
  return cand;
}

}  // namespace kiln::llm_bridge
