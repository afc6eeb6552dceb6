// kiln: the one command users touch (DESIGN §9).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "import_cmd.h"
#include "registry_cmds.h"
#include "kiln/log/log.h"

namespace {

std::string default_tasks_dir() {
  if (std::filesystem::exists("configs/tasks")) return "configs/tasks";
  return std::string(KILN_DEFAULT_SOURCE_DIR) + "/configs/tasks";
}

// A number option's bound: "--budget: expected a number >= 0, got -1".
CLI::Validator at_least(double min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        double value = 0;
        if (CLI::detail::lexical_cast(text, value) && value >= min) return "";
        char bound[32];
        std::snprintf(bound, sizeof bound, "%g", min);
        return std::string("expected a number >= ") + bound + ", got " + text;
      },
      "");
}

// Every parse error as one line: what was wrong, and where help is.
std::string one_line_failure(const CLI::App*, const CLI::Error& e) {
  return std::string("kiln: ") + e.what() + " (see kiln --help)\n";
}

int run(int argc, char** argv);

}  // namespace

// Nothing escapes as an exception: a library that throws (ZeroMQ on a socket error) ends the command
// with one line, like any other failure.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
    return 1;
  }
}

namespace {

int run(int argc, char** argv) {
  using namespace kiln::cli;
  CLI::App app{"kiln: finds faster kernels and proves them correct and faster"};
  app.require_subcommand(1);
  // The options above (--json, --broker, --config) are taken after a subcommand too: every subcommand
  // inherits this before it is added.
  app.fallthrough();
  app.failure_message(one_line_failure);
  Common common;
  app.add_option("--config", common.config_path, "YAML config (default: built-in defaults + KILN_* env)");
  app.add_option("--broker", common.broker, "broker endpoint (default: from broker.bind)");
  app.add_flag("--json", common.json, "machine-readable output");

  UpOptions up;
  auto* up_cmd = app.add_subcommand("up", "start every service locally as supervised child processes");
  up_cmd->add_option("--state-dir", up.state_dir, "folder for databases, caches and logs (default .kiln)");
  up_cmd->add_flag("--demo", up.demo, "also submit the bundled tasks, show progress and print the results");
  up_cmd->add_option("--tasks", up.tasks_dir, "task folder for --demo (default configs/tasks)");
  up_cmd->add_option("--budget", up.budget, "proposals per campaign for --demo (default 8)")->check(at_least(0));
  up_cmd->add_option("--timeout", up.demo_timeout_s, "give up on --demo after this many seconds")->check(at_least(0));

  SubmitOptions sub;
  auto* sub_cmd = app.add_subcommand("submit", "validate and submit a task package (a folder, .tar.gz or .zip)");
  sub_cmd->add_option("dir", sub.dir, "task package")->required();
  sub_cmd->add_option("--budget", sub.budget, "proposals after program 0")->check(at_least(0));
  sub_cmd->add_option("--proposer", sub.proposer, "tuner | llm | external (a bridge connected over CURVE)")
      ->check(CLI::IsMember({"tuner", "llm", "external"}));
  sub_cmd->add_option("--max-in-flight", sub.max_in_flight, "proposals evaluated at once")->check(at_least(1));
  sub_cmd->add_flag("--wait", sub.wait,
                    "show progress until the campaign ends, then the result (exit 3 if programs were not "
                    "evaluated; Ctrl-C stops waiting, not the campaign)");
  sub_cmd->add_option("--timeout", sub.timeout_s, "with --wait: give up after this many seconds")->check(at_least(0));
  sub_cmd->add_option("--target-speedup", sub.target_speedup, "stop proposing once the best speedup reaches this")
      ->check(at_least(0));
  sub_cmd->add_option("--patience", sub.patience, "stop after this many proposals without a better program")
      ->check(at_least(0));
  sub_cmd->add_option("--campaign-id", sub.campaign_id,
                      "the campaign's id (default: the task's name and a fresh suffix); the tuner's order of "
                      "parameter sets follows it; an id in use names that campaign (submitting the same task "
                      "again changes nothing, another task is refused)");

  sub_cmd
      ->add_option("--priority", sub.priority,
                   "the campaign's jobs go before those of lower priorities at every stage (default 0; "
                   "campaigns of one priority take turns)")
      ->check(CLI::Range(kiln::proto::kMinPriority, kiln::proto::kMaxPriority));

  std::string campaign;
  StatusOptions status;
  auto* status_cmd = app.add_subcommand("status", "queues, workers and campaigns: the running ones and the last ended");
  status_cmd->add_option("campaign", status.campaign, "one campaign id");
  status_cmd->add_flag("--all", status.all, "every campaign ever run, not only the running and recent ones");
  status_cmd->add_option("--recent", status.recent, "how many ended campaigns to list (default 10)")
      ->check(at_least(0));
  auto* best_cmd = app.add_subcommand("best", "the best kernels of a campaign with their evidence");
  best_cmd->add_option("campaign", campaign, "campaign id")->required();
  int best_top = 5;
  best_cmd->add_option("--top", best_top, "how many programs, best first (1..1000)")->check(CLI::Range(1, 1000));

  auto* cancel_cmd = app.add_subcommand("cancel", "stop a campaign's proposals; what is in flight finishes");
  cancel_cmd->add_option("campaign", campaign, "campaign id")->required();

  std::string report_out;
  auto* report_cmd = app.add_subcommand("report", "a campaign as one self-contained HTML page");
  report_cmd->add_option("campaign", campaign, "campaign id")->required();
  report_cmd->add_option("-o,--out", report_out,
                         "where to write it, in a folder that exists (default kiln-report-<campaign>.html)");

  auto* task_cmd = app.add_subcommand("task", "task packages");
  task_cmd->require_subcommand(1);
  std::string task_dir, task_name, task_parent = ".";
  auto* validate_cmd = task_cmd->add_subcommand("validate", "check a package offline");
  validate_cmd->add_option("dir", task_dir, "package folder, .tar.gz or .zip")->required();
  auto* new_cmd = task_cmd->add_subcommand("new", "scaffold a new CPU task package");
  new_cmd->add_option("name", task_name, "task name ([a-z0-9_]+)")->required();
  new_cmd->add_option("--dir", task_parent, "the folder (it must exist) to create it in (default .)");
  ImportOptions imp;
  auto* import_cmd = task_cmd->add_subcommand("import", "a task package from a KernelBench-format problem file");
  import_cmd->add_option("problem", imp.problem, "the problem (class Model, get_inputs, get_init_inputs)")->required();
  import_cmd->add_option("-o,--out", imp.out_dir, "the package folder to write")->required();
  import_cmd->add_option("--backend", imp.backend, "cpu | cuda (default cpu)");
  import_cmd->add_option("--set", imp.sets, "NAME=VALUE: a module-level constant changed (repeatable)")
      ->allow_extra_args(false);
  import_cmd->add_option("--kernel", imp.kernel, "program 0 (default: an empty editable region)");
  import_cmd->add_option("--python", imp.python, "an interpreter with torch (default /usr/bin/python3)");

  RegistryCommand reg;
  add_registry_command(app, common, reg);

  auto* keys_cmd = app.add_subcommand("keys", "CURVE keys for external bridges");
  keys_cmd->require_subcommand(1);
  std::string key_name, key_dir = ".";
  auto* keys_new_cmd = keys_cmd->add_subcommand("new", "write NAME.key and NAME.pub and print the allowlist line");
  keys_new_cmd->add_option("name", key_name, "bridge name ([A-Za-z0-9_.-], at most 64)")->required();
  keys_new_cmd->add_option("--dir", key_dir, "where to write the key files (default .)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // "frobnicate" where a command belongs: CLI11 would only say that a subcommand is required.
    if (const auto extra = app.remaining();
        !app.get_subcommands().size() && !extra.empty() && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      std::fprintf(stderr, "kiln: unknown command '%s' (see kiln --help)\n", extra.front().c_str());
      return kUsageExit;
    }
    const int rc = app.exit(e);  // prints the help asked for, or the one-line failure
    return rc == 0 ? 0 : kUsageExit;
  }

  if (auto st = check_endpoint(common.broker); !st.is_ok()) {
    std::fprintf(stderr, "kiln: --broker: %s\n", st.message().c_str());
    return kUsageExit;
  }
  kiln::log::init("kiln", "info");
  auto cfg = kiln::config::load_config(common.config_path);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "kiln: %s\n", cfg.status().message().c_str());
    return kUsageExit;
  }
  common.config = std::move(cfg).value();

  if (*up_cmd) {
    if (up.tasks_dir.empty()) up.tasks_dir = default_tasks_dir();
    return cmd_up(common, up);
  }
  if (*sub_cmd) return cmd_submit(common, sub);
  if (*status_cmd) return cmd_status(common, status);
  if (*best_cmd) return cmd_best(common, campaign, best_top);
  if (*cancel_cmd) return cmd_cancel(common, campaign);
  if (*report_cmd) return cmd_report(common, campaign, report_out);
  if (*validate_cmd) return cmd_task_validate(common, task_dir);
  if (*new_cmd) return cmd_task_new(common, task_name, task_parent);
  if (*import_cmd) return cmd_task_import(imp);
  if (*reg.cmd) return run_registry_command(common, reg);
  if (*keys_new_cmd) return cmd_keys_new(common, key_name, key_dir);
  return 1;
}

}  // namespace
