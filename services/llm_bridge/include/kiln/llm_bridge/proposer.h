// Proposers turn a ProposalRequest into a candidate. The built-in tuner walks the task's template
// parameter space; LLM proposers (prompting, code extraction) plug in behind the same interface later.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"

namespace kiln::llm_bridge {

class Proposer {
 public:
  virtual ~Proposer() = default;
  // The label of kiln_llm_requests_total{model}: "tuner", or the LLM model name.
  virtual std::string model() const = 0;
  // A candidate for req.program_id, or why none could be produced (it is then scored as "no code").
  virtual Result<proto::Candidate> propose(const proto::ProposalRequest& req) = 0;
};

// The cartesian product of a task's template parameters (in file order), indexed in mixed radix with
// the last parameter varying fastest. Index 0 is every parameter's first value: program 0's combination.
class ParamSpace {
 public:
  // Spaces beyond this many combinations are refused: an index must fit comfortably in 64 bits.
  static constexpr uint64_t kMaxSize = uint64_t{1} << 40;

  static Result<ParamSpace> make(std::vector<std::pair<std::string, std::vector<std::string>>> params);
  uint64_t size() const { return size_; }
  std::map<std::string, std::string> combination(uint64_t index) const;

 private:
  std::vector<std::pair<std::string, std::vector<std::string>>> params_;
  uint64_t size_ = 1;
};

// The combination index the tuner gives proposal `proposal` (1-based) of a campaign: the proposal-th
// element of a permutation of [1, space_size) drawn from `seed`. Index 0 (program 0) never comes up and
// no index repeats; past the end of the space the answer is "parameter space exhausted".
Result<uint64_t> tuner_combination(uint64_t space_size, uint64_t seed, int64_t proposal);

// The tuner: same code as the parent, the next untried parameter combination. The permutation is seeded
// by hash(campaign id) so every proposal of a campaign draws from the same order, whichever bridge
// replica serves it and whatever parent it was given.
class TunerProposer final : public Proposer {
 public:
  std::string model() const override { return "tuner"; }
  Result<proto::Candidate> propose(const proto::ProposalRequest& req) override;
};

}  // namespace kiln::llm_bridge
