// `kiln task import PROBLEM.py -o DIR`: a Kiln task package from a KernelBench-format problem.
#pragma once

#include <string>
#include <vector>

namespace kiln::cli {

struct ImportOptions {
  std::string problem;                      // the KernelBench-format file
  std::string out_dir;                      // the package to write (absent or empty)
  std::string backend = "cpu";              // cpu | cuda
  std::vector<std::string> sets;            // NAME=VALUE: the file's module-level constants overridden
  std::string kernel;                       // program 0 (must hold an EVOLVE region); empty: an empty region
  std::string python = "/usr/bin/python3";  // an interpreter with torch
};

int cmd_task_import(const ImportOptions& o);

}  // namespace kiln::cli
