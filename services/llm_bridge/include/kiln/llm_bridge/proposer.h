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
#include "kiln/service/task_source.h"

namespace kiln::llm_bridge {

// What a proposal cost and where it came from, reported whether or not it produced code.
struct ProposalInfo {
  std::string model;  // the model asked ("" = Proposer::model())
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Recorded with the program (Candidate.metadata): prompt_id, parent_prompt_id, prompt_text, ...
  std::map<std::string, std::string> metadata;
  // The proposer counted its own kiln_llm_requests_total (one per HTTP attempt).
  bool requests_counted = false;
  // The model's answer as it came, before code extraction (at most proto::kMaxRawLlmCodeBytes): the
  // candidate's raw_llm_code, kept also when nothing could be extracted from it.
  std::string raw_reply;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // The label of kiln_llm_requests_total{model}: "tuner", or the LLM model name.
  virtual std::string model() const = 0;
  // A candidate for req.program_id on `package`, the request's package as the handler resolved and parsed it
  // (req.files may be empty: the package came by name), or why none could be produced (it is then scored
  // as "no code").
  virtual Result<proto::Candidate> propose(const proto::ProposalRequest& req, const service::TaskPackage& package) = 0;
  // The same, reporting model, tokens and metadata into `info` even when it fails.
  virtual Result<proto::Candidate> propose_with_info(const proto::ProposalRequest& req,
                                                     const service::TaskPackage& package, ProposalInfo& info) {
    info.model = model();
    return propose(req, package);
  }
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
  // Sum over parameters of |value position in a - value position in b|; unknown values count 1.
  uint64_t distance(uint64_t index, const std::map<std::string, std::string>& other) const;

 private:
  std::vector<std::pair<std::string, std::vector<std::string>>> params_;
  uint64_t size_ = 1;
};

// The combination index the tuner gives proposal `proposal` (1-based) of a campaign: the proposal-th
// element of a permutation of [1, space_size) drawn from `seed`. Index 0 (program 0) never comes up and
// no index repeats; past the end of the space the answer is "parameter space exhausted".
Result<uint64_t> tuner_combination(uint64_t space_size, uint64_t seed, int64_t proposal);

// Block sampling (ProposalRequest.tuner_blocks): when the space is larger than the budget, proposal k
// owns the block of `block`
// consecutive permutation elements starting at (k-1)*block. Even proposals take the one nearest (in
// ordinal distance over the parameters' value lists) to their parent, the archive's pick of a good
// program so far; odd ones the block's first (a uniform sample). Blocks of different proposals are
// disjoint, so no combination comes up twice whatever the parents were; with block 1 this is
// tuner_combination. block = max(1, (space_size-1) / budget), at most 4.
uint64_t tuner_block_size(uint64_t space_size, int64_t budget);
Result<std::vector<uint64_t>> tuner_block(uint64_t space_size, uint64_t seed, int64_t proposal, uint64_t block);

// The tuner: same code as the parent, the next untried parameter combination. The permutation is seeded
// by hash(campaign id) so every proposal of a campaign draws from the same order, whichever bridge
// replica serves it and whatever parent it was given.
class TunerProposer final : public Proposer {
 public:
  std::string model() const override { return "tuner"; }
  Result<proto::Candidate> propose(const proto::ProposalRequest& req, const service::TaskPackage& package) override;
};

}  // namespace kiln::llm_bridge
