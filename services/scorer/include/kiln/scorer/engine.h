// The campaign engine behind the scorer (service "score"): it scores results, keeps every program of a
// campaign in SQLite, and decides what happens next — more proposals, a confirming measurement, a
// promotion — by answering each job with follow-up jobs (DESIGN §1, §6, §7).
//
// Durability and exactly-once: the state change a job causes and the answer it gets (its follow-ups)
// are committed in one transaction together with the job id. A job id seen before gets the stored answer
// back unchanged, so a job redelivered after a crash produces the same follow-ups and counts nothing
// twice. A second result for a program that is already scored is ignored (and counted).
//
// Search: each campaign's scored programs live in a MAP-Elites archive (kiln/archive/archive.h), rebuilt
// from the programs table in scoring order, so a restarted scorer makes the same choices it would have
// made. Proposal i goes to island (i-1) % islands with a parent, inspirations and a target cell from that
// island; "llm" campaigns also get the fittest strategy section (prompts table) and, every
// prompt_evolution_interval proposals, a request to rewrite it. Proposals stop at the budget, at the
// target speedup or after `patience` scored proposals without a new best (campaign_control table).
//
// The work is split by concern, each in its own file beside this service's handler: the rows
// (campaign_store), the in-memory archives (campaign_archives), meta-prompts (prompt_book), proposals,
// the lifecycle of a campaign (start, early stop, finish), results, confirmation and promotion
// (promotions), dead letters and queries. Ids are in campaign_ids.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "kiln/archive/archive.h"
#include "kiln/core/status.h"
#include "kiln/messaging/handler.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "kiln/scorer/campaign_ids.h"
#include "kiln/service/task_source.h"

namespace kiln::scorer {

struct EngineOptions {
  double min_speedup = 1.10;        // promotion bar for speedup and its lower bound (DESIGN §7)
  std::string cuda_arch = "sm_90";  // compile target for CUDA tasks; CPU tasks build for "native"
  int64_t default_max_in_flight = 4;
  std::string archive = "map_elites";  // map_elites | elites (the plain top-k list)
  archive::EliteOptions elites;
  archive::MapElitesOptions map_elites;
  // Early stop, for campaigns that name none: 0 = off.
  double target_speedup = 0;  // stop proposing once the best correct speedup reaches this
  int64_t patience = 0;       // stop after this many scored proposals without a new best
  // Meta-prompt evolution for "llm" campaigns: every this many proposals the strategy is rewritten
  // (0 = never).
  int64_t prompt_evolution_interval = 5;
  // Tuner campaigns: block sampling nearer the best (ProposalRequest.tuner_blocks); off by default, as
  // kiln-bench-tuner found it helps some spaces and hurts others.
  bool tuner_blocks = false;
  // Proposals carry the campaign's best as the screening bar of their first measurement (screening_bar).
  bool screen_by_best = true;
  // Names task packages for the jobs the engine makes (the broker's blob store); the default, without a
  // store, leaves the packages in the jobs. Proposals of "external" campaigns always carry theirs (bridges
  // read them, DESIGN §9).
  std::shared_ptr<service::TaskSource> tasks = std::make_shared<service::TaskSource>();
};

struct Handled {
  messaging::JobOutcome answer;  // outcome, payload, error and follow-ups
  bool replayed = false;         // the job id was handled before: `answer` is the stored one
  bool duplicate = false;        // a repeated result or start for something already recorded: ignored
};

class CampaignEngine {
 public:
  // Opens (creating) the archive database; nothing is re-seeded: campaigns resume from what is stored.
  static Result<std::unique_ptr<CampaignEngine>> open(const std::string& db_path, EngineOptions options = {});
  ~CampaignEngine();
  CampaignEngine(const CampaignEngine&) = delete;
  CampaignEngine& operator=(const CampaignEngine&) = delete;

  // Handles one job of the "score" service; its payload's "kind" is campaign.start, campaign.cancel, result,
  // dead or promoted. An error Status means nothing changed and nothing was recorded; its code says what went
  // wrong, as libraries say it: kInvalidArgument or kNotFound for bad input (undecodable, an unknown
  // campaign or program), kUnavailable for a busy database, kInternal for a broken archive. The handler
  // says whose fault that is (never the candidate's) and answers by messaging::outcome_for.
  Result<Handled> handle_job(std::string_view job_id, std::string_view payload);

  // Queries (`kiln status`, `kiln best`). Safe to call from another thread than handle_job.
  Result<proto::CampaignList> campaigns(const proto::CampaignQuery& query);
  Result<proto::CampaignInfo> campaign(const std::string& campaign_id);  // kNotFound if unknown
  Result<proto::BestPrograms> best(const proto::CampaignQuery& query);   // top programs, best first

  // The best correct speedup per task name over its campaigns (kiln_campaign_best_speedup{task}).
  Result<std::map<std::string, double>> best_speedup_by_task();
  // Results ignored as duplicates, over all campaigns.
  Result<int64_t> duplicates_ignored();

  // What the engine keeps in memory: the archives of running campaigns (and the programs in them) and
  // their parsed task specs. A campaign's leave when it ends, so this follows the campaigns running, not
  // the history.
  struct Residency {
    size_t archives = 0;
    size_t programs = 0;
    size_t specs = 0;
  };
  Residency resident();

 private:
  struct Impl;
  explicit CampaignEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::scorer
