// The `kiln` subcommands. Each returns the process exit code; failures print one clear line.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/proto/payloads.h"

namespace kiln::cli {

// Exit codes: 0 done; 1 an error (one line on stderr says which); 2 bad arguments or config;
// kIncompleteExit a campaign ended with programs not evaluated (the line says why); kInterruptedExit Ctrl-C.
inline constexpr int kUsageExit = 2;
inline constexpr int kIncompleteExit = 3;
inline constexpr int kInterruptedExit = 130;

// Prints "kiln: <line>" to stderr and returns the failure exit code.
int fail(const std::string& line);
// invalid_argument unless `endpoint` is "" (the config's), tcp://HOST:PORT, ipc://PATH or inproc://NAME.
Status check_endpoint(const std::string& endpoint);
// "<path>: <message>", or `message` alone when it names the path already.
std::string with_path(const std::string& path, const std::string& message);

struct Common {
  std::string config_path;
  std::string broker;  // endpoint; empty = from config
  bool json = false;
  kiln::config::KilnConfig config;
  std::string broker_endpoint() const;
};

struct SubmitOptions {
  std::string dir;
  int64_t budget = -1;  // -1: config default (the parser refuses a negative budget given)
  std::string proposer = "tuner";
  int64_t max_in_flight = -1;  // -1: config default (the parser refuses less than 1 given)
  bool wait = false;
  double timeout_s = 0;       // 0: no limit while waiting
  double target_speedup = 0;  // stop early once reached (0: the scorer's default)
  int64_t patience = 0;       // stop after this many proposals without improvement (0: default)
  // The campaign's id ("": the task's name and a fresh suffix). The tuner's order of parameter sets is
  // drawn from it, so two runs under one id try the same sets; an id in use names that campaign, and
  // submitting it again changes nothing.
  std::string campaign_id;
  // The broker hands out the jobs of a higher priority first (docs/operations.md); 0 by default.
  int64_t priority = 0;
};

int cmd_submit(const Common& c, const SubmitOptions& o);
// `kiln status`: queues, workers, and the running campaigns with the `recent` that ended last (all of them
// with `all`, or the one named).
struct StatusOptions {
  std::string campaign;
  bool all = false;
  int64_t recent = 10;
};
int cmd_status(const Common& c, const StatusOptions& o);
int cmd_best(const Common& c, const std::string& campaign, int top = 5);
// `kiln cancel CAMPAIGN`: the scorer proposes no more for it; what is in flight finishes.
int cmd_cancel(const Common& c, const std::string& campaign);
int cmd_task_validate(const Common& c, const std::string& dir);
int cmd_task_new(const Common& c, const std::string& name, const std::string& parent_dir);
int cmd_keys_new(const Common& c, const std::string& name, const std::string& dir);

// `kiln report CAMPAIGN [-o FILE]`: writes the campaign's HTML report (default kiln-report-<id>.html in
// the current folder) and prints its absolute path.
int cmd_report(const Common& c, const std::string& campaign, const std::string& path);
// not_found unless the folder `path` goes into exists: kiln writes files, it creates no folders for them.
Status check_output_folder(const std::string& path);
Result<std::string> write_report(const Common& c, const std::string& campaign, const std::string& path);
std::string default_report_path(const std::string& campaign);
// "report: kiln report <id>, or http://<scorer host>:<port>/campaigns/<id>/report" for text output.
std::string report_hint(const Common& c, const std::string& campaign);

struct UpOptions {
  std::string state_dir;  // empty: config up.state_dir
  bool demo = false;
  std::string tasks_dir;  // bundled tasks for --demo
  int64_t budget = 8;     // the demo's proposals per campaign: a few minutes on a laptop
  double demo_timeout_s = 1800;
};
int cmd_up(const Common& c, const UpOptions& o);

// Shared by submit --wait and up --demo.
std::string format_speedup(double s, double lo, double hi);
void print_results_table(const std::vector<proto::CampaignInfo>& campaigns);
// Polls the scorer until every campaign is done (or the timeout); draws progress on stderr.
// `tick` runs between polls; returning false stops the wait (e.g. on Ctrl-C) with kInterruptedExit.
int wait_for_campaigns(const Common& c, const std::vector<std::string>& ids, double timeout_s, bool quiet,
                       const std::function<bool()>& tick = {});
// kIncompleteExit, with a line on stderr for each, when any of `campaigns` has programs not evaluated;
// else 0.
int campaigns_exit_code(const std::vector<proto::CampaignInfo>& campaigns);
// Validates and submits one package; returns the campaign id. An id given in `o` that names a campaign of
// the same task returns that campaign (nothing is submitted); one of another task is refused.
Result<std::string> submit_task(const Common& c, const SubmitOptions& o);

}  // namespace kiln::cli
