// The campaign store: the archive database's rows (schema.cc) as plain structs, read and written by the
// engine inside the transaction of one job. It maps rows and runs statements; what a row change means is
// decided by its callers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/messaging/handler.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "kiln/store/sqlite.h"

namespace kiln::scorer {

// Campaign states.
inline constexpr std::string_view kRunning = "running";
inline constexpr std::string_view kDone = "done";
// Program states.
inline constexpr std::string_view kPending = "pending";
inline constexpr std::string_view kScored = "scored";
// A program whose job died by faults that were not its own (DeadLetter::worker_retry): no score, no place
// in the archive. Its state and its status word.
inline constexpr std::string_view kNotEvaluated = "not_evaluated";

// Promotion states: a program asks for confirmation, then promotion; the last four are final.
namespace promo {
inline constexpr std::string_view kConfirming = "confirming";
inline constexpr std::string_view kPromoting = "promoting";
inline constexpr std::string_view kPromoted = "promoted";
inline constexpr std::string_view kRefused = "refused";
inline constexpr std::string_view kNotConfirmed = "not_confirmed";
inline constexpr std::string_view kFailed = "failed";
}  // namespace promo

struct CampaignRow {
  std::string id, task_id, task_name, op, dtype, proposer, state, best_program_id;
  proto::Backend backend = proto::Backend::kCpu;  // its task's, validated at the start
  proto::FileMap files;
  int64_t budget = 0, max_in_flight = 1, proposed = 0, scored = 0, duplicates = 0;
  double submitted_at = 0, started_at = 0, finished_at = 0;
  // campaign_control (absent for campaigns of a version-1 archive: the engine's defaults then)
  double target_speedup = 0;
  int64_t patience = 0;
  std::string stop_reason;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  // Proposals stop at the budget or at an early stop.
  bool proposing() const { return proposed < budget && stop_reason.empty(); }
};

struct ProgramRow {
  std::string campaign_id;
  std::string state;
  int64_t proposal_index = 0;
  proto::Program record;
};

// The program record in column `col` of a row (the msgpack blob, the source of truth for a program); a
// record that does not decode is a broken archive, kInternal naming `owner` ("program c1/p3").
Result<proto::Program> program_record(const store::Statement& row, int col, const std::string& owner);

// Early-stop settings of a campaign stored without a campaign_control row.
struct ControlDefaults {
  double target_speedup = 0;
  int64_t patience = 0;
};

class CampaignStore {
 public:
  // `db` holds the archive schema (schema.h).
  CampaignStore(store::Database db, ControlDefaults defaults);
  CampaignStore(const CampaignStore&) = delete;
  CampaignStore& operator=(const CampaignStore&) = delete;

  // For transactions and the read-only statements of queries and prompts.
  store::Database& db() { return db_; }

  // The first column of a one-row statement with the campaign id as its only parameter (0 without a row).
  Result<int64_t> count(std::string_view sql, const std::string& campaign_id);

  // ------------------------------------------------------------------------- campaigns
  Result<std::optional<CampaignRow>> load_campaign(const std::string& id);
  Status insert_campaign(const CampaignRow& c);  // and its campaign_control row
  Status save_control(const CampaignRow& c);     // target, patience, stop reason, tokens
  Status save_proposed(const CampaignRow& c);
  Status save_best_program(const CampaignRow& c);
  Status save_state(const CampaignRow& c);  // state and finished_at
  // Counts a repeated result or start against the campaign (c.duplicates).
  Status add_duplicate(CampaignRow& c);

  // The cells an ended campaign's archive filled, as saved when it ended (nullopt: not saved).
  Result<std::optional<int64_t>> saved_cells_filled(const std::string& campaign_id);
  Status save_cells_filled(const std::string& campaign_id, int64_t cells);

  // ------------------------------------------------------------------------- programs
  Result<std::optional<ProgramRow>> load_program(const std::string& id);
  // A new program, pending until it is scored or ends unevaluated.
  Status insert_program(const CampaignRow& c, const proto::Program& p, int64_t proposal_index,
                        std::string_view proposer);
  // Scored: the next scored_seq of the campaign (c.scored) and the eval columns.
  Status store_scored_program(CampaignRow& c, const proto::Program& p);
  // Ended without a score; its record carries why.
  Status store_not_evaluated(const std::string& program_id, const proto::Program& p);
  // When it was scored, in the campaign's scoring order; nullopt for an unknown program.
  Result<std::optional<int64_t>> scored_seq(const std::string& program_id);
  // The campaign's scored programs in scoring order (to rebuild its archive).
  Status for_each_scored(const std::string& campaign_id, const std::function<void(const proto::Program&)>& fn);
  Result<int64_t> pending_programs(const std::string& campaign_id);

  // ------------------------------------------------------------------------- results
  // false when a result for this program and purpose (its evaluation, its confirmation) was already stored.
  Result<bool> insert_result(const std::string& program_id, proto::Purpose purpose, const std::string& campaign_id,
                             std::string_view job_id, const proto::ScoreResult& r);
  Result<std::optional<proto::ScoreResult>> load_result(const std::string& program_id, proto::Purpose purpose);

  // ------------------------------------------------------------------------- promotions
  // false when the program already has a promotion row.
  Result<bool> insert_promotion(const std::string& program_id, const std::string& campaign_id);
  Result<std::optional<std::string>> promotion_state(const std::string& program_id);
  Status set_promotion(const std::string& program_id, std::string_view state, std::string_view kernel_id,
                       std::string_view note);
  Result<int64_t> pending_promotions(const std::string& campaign_id);

  // ------------------------------------------------------------------------- processed jobs
  // The answer a job id got, if it was handled before. Stored as the RESULT the codec writes for it
  // (messaging::to_result), so archives written before answers were Outcomes read the same.
  Result<std::optional<messaging::JobOutcome>> processed(std::string_view job_id);
  Status record_processed(std::string_view job_id, std::string_view kind, const std::string& campaign_id,
                          const messaging::JobOutcome& answer);

 private:
  store::Database db_;
  ControlDefaults defaults_;
};

}  // namespace kiln::scorer
