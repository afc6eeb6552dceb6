#include "kiln/scorer/engine.h"

#include <mutex>
#include <optional>
#include <utility>

#include "campaign_archives.h"
#include "campaign_lifecycle.h"
#include "campaign_store.h"
#include "dead_letters.h"
#include "follow_ups.h"
#include "kiln/proto/codec.h"
#include "kiln/store/sqlite.h"
#include "promotions.h"
#include "prompt_book.h"
#include "proposals.h"
#include "queries.h"
#include "results.h"
#include "schema.h"
#include "task_specs.h"

namespace kiln::scorer {

// The parts of the engine, each holding references to the ones declared before it.
struct CampaignEngine::Impl {
  EngineOptions options;
  CampaignStore store;
  CampaignArchives archives{store, options};
  TaskSpecs specs;
  PromptBook prompts{store};
  Queries queries{store, archives};
  Proposals proposals{store, archives, prompts, options};
  CampaignLifecycle lifecycle{store, specs, proposals, queries, options};
  Promotions promotions{store, specs, lifecycle, options};
  Results results{store, archives, specs, prompts, proposals, lifecycle, promotions, options};
  DeadLetters dead_letters{results, promotions};
  // Guards everything above: jobs and queries arrive on different threads.
  std::mutex mu;

  Impl(store::Database db, EngineOptions o)
      : options(std::move(o)), store(std::move(db), ControlDefaults{options.target_speedup, options.patience}) {}

  Status dispatch(std::string_view kind, std::string_view job_id, std::string_view payload, Effects& fx) {
    if (kind == proto::kind::kCampaignStart) return lifecycle.start(payload, fx);
    if (kind == proto::kind::kResult) {
      auto r = proto::decode<proto::ScoreResult>(payload);
      if (!r.is_ok()) return invalid_argument("result: " + r.status().message());
      return results.on_result(job_id, std::move(r).value(), fx);
    }
    if (kind == proto::kind::kDead) return dead_letters.on_dead(job_id, payload, fx);
    if (kind == proto::kind::kPromoted) return promotions.on_promoted(payload, fx);
    if (kind == proto::kind::kCampaignCancel) return lifecycle.cancel(payload, fx);
    return invalid_argument("unknown payload kind '" + std::string(kind) + "'");
  }

  // The job's state change and its answer, committed together or not at all.
  Status apply(std::string_view job_id, std::string_view kind, std::string_view payload, messaging::JobOutcome& answer,
               Effects& fx) {
    store::Transaction tx(store.db());
    KILN_RETURN_IF_ERROR(tx.begin_status());
    KILN_RETURN_IF_ERROR(dispatch(kind, job_id, payload, fx));
    answer = messaging::JobOutcome::ok(std::move(fx.next), std::move(fx.payload));
    KILN_RETURN_IF_ERROR(store.record_processed(job_id, kind, fx.campaign_id, answer));
    return tx.commit();
  }

  // What a campaign keeps in memory lives as long as it runs: dropped once the job that ended it commits
  // (or a late job of an ended campaign brought it back).
  void release_if_ended(const std::string& campaign_id) {
    if (campaign_id.empty() || (!archives.holds(campaign_id) && !specs.holds(campaign_id))) return;
    auto running = store.count("SELECT COUNT(*) FROM campaigns WHERE id = ? AND state = 'running'", campaign_id);
    if (!running.is_ok() || *running > 0) return;  // unreadable: kept, as if running, until the next job
    archives.release(campaign_id);
    specs.release(campaign_id);
  }

  // A job that fails changes nothing and is not recorded, so it gets the same answer if it comes again.
  Result<Handled> handle_job(std::string_view job_id, std::string_view payload) {
    Handled out;
    KILN_ASSIGN_OR_RETURN(auto prior, store.processed(job_id));
    if (prior) {
      out.answer = std::move(*prior);
      out.replayed = true;
      return out;
    }
    auto kind = proto::peek_string(payload, "kind");
    if (!kind.is_ok()) return invalid_argument("score job " + std::string(job_id) + ": " + kind.status().message());

    Effects fx;
    Status st = apply(job_id, *kind, payload, out.answer, fx);
    if (!st.is_ok()) {
      // The transaction rolled back; so must the in-memory views.
      archives.clear();
      specs.clear();
      return st;
    }
    release_if_ended(fx.campaign_id);
    out.duplicate = fx.duplicate;
    return out;
  }
};

CampaignEngine::CampaignEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CampaignEngine::~CampaignEngine() = default;

Result<std::unique_ptr<CampaignEngine>> CampaignEngine::open(const std::string& db_path, EngineOptions options) {
  auto db = store::Database::open(db_path);
  if (!db.is_ok()) return db.status().with_context("archive " + db_path);
  Status st = detail::ensure_schema(*db);
  if (!st.is_ok()) return st.with_context("archive " + db_path);
  if (options.elites.capacity == 0) options.elites.capacity = 1;
  return std::unique_ptr<CampaignEngine>(
      new CampaignEngine(std::make_unique<Impl>(std::move(db).value(), std::move(options))));
}

Result<Handled> CampaignEngine::handle_job(std::string_view job_id, std::string_view payload) {
  std::lock_guard lock(impl_->mu);
  return impl_->handle_job(job_id, payload);
}

Result<proto::CampaignList> CampaignEngine::campaigns(const proto::CampaignQuery& query) {
  std::lock_guard lock(impl_->mu);
  return impl_->queries.campaigns(query);
}

Result<proto::CampaignInfo> CampaignEngine::campaign(const std::string& campaign_id) {
  std::lock_guard lock(impl_->mu);
  return impl_->queries.campaign(campaign_id);
}

Result<proto::BestPrograms> CampaignEngine::best(const proto::CampaignQuery& query) {
  std::lock_guard lock(impl_->mu);
  return impl_->queries.best(query);
}

Result<std::map<std::string, double>> CampaignEngine::best_speedup_by_task() {
  std::lock_guard lock(impl_->mu);
  return impl_->queries.best_speedup_by_task();
}

CampaignEngine::Residency CampaignEngine::resident() {
  std::lock_guard lock(impl_->mu);
  return Residency{impl_->archives.resident(), impl_->archives.resident_programs(), impl_->specs.resident()};
}

Result<int64_t> CampaignEngine::duplicates_ignored() {
  std::lock_guard lock(impl_->mu);
  return impl_->queries.duplicates_ignored();
}

}  // namespace kiln::scorer
