// `kiln registry list|show|verify|match`: the command line of the verified-kernel registry, declared
// here and defined in registry_cmds.cc; main.cc only adds the command and runs it.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "commands.h"

namespace kiln::cli {

// `kiln registry match`: the planner of kiln/registry/match.h on the registry in a folder.
struct MatchOptions {
  std::string op;
  std::string dtype;       // a dtype or a quantization (fp8, awq, ...)
  std::string shape;       // "K=V,K=V", parsed strictly
  std::string gpu;         // empty: any GPU
  bool gpu_given = false;  // --gpu was on the command line (an empty name is then an error)
  double max_shape_ratio = 2.0;
  bool allow_unhashed = false;
};

// The registry command's options and subcommands, filled by CLI11.
struct RegistryCommand {
  CLI::App* cmd = nullptr;
  CLI::App* list = nullptr;
  CLI::App* show = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* match = nullptr;
  CLI::Option* gpu_option = nullptr;
  std::string dir;  // empty: promoter.registry_dir
  std::string kernel_id;
  MatchOptions match_options;
};

// Adds `registry` and its subcommands to `app`; `common.json` is also settable after `match`.
void add_registry_command(CLI::App& app, Common& common, RegistryCommand& r);
// Runs the subcommand that was parsed (call when *r.cmd is set).
int run_registry_command(const Common& c, RegistryCommand& r);

int cmd_registry_list(const Common& c, const std::string& dir);
int cmd_registry_show(const Common& c, const std::string& dir, const std::string& id);
int cmd_registry_verify(const Common& c, const std::string& dir);
int cmd_registry_match(const Common& c, const std::string& dir, const MatchOptions& o);

}  // namespace kiln::cli
