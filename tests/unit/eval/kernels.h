// Builds small kernels for the eval tests with the system g++, the way the compiler service would.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "kiln/core/files.h"

namespace kiln::eval::testing {

// Compiles `source` (a whole .cpp) into a shared object once per test process; returns its path or "".
inline std::string build_kernel(const std::string& name, const std::string& source, const std::string& defines = "") {
  static std::map<std::string, std::string> built;
  static auto dir = std::make_unique<TempDir>("kiln-eval-test");
  std::string key = name + "|" + defines;
  if (auto it = built.find(key); it != built.end()) return it->second;
  std::string base = dir->path() + "/" + name + std::to_string(built.size());
  if (!write_file_atomic(base + ".cpp", source).is_ok()) return "";
  std::string cmd = "g++ -O2 -march=native -fopenmp -shared -fPIC -std=c++17 -I" KILN_SOURCE_DIR "/libs/core/include " +
                    defines + " -o " + base + ".so " + base + ".cpp";
  if (std::system(cmd.c_str()) != 0) return "";
  built[key] = base + ".so";
  return base + ".so";
}

}  // namespace kiln::eval::testing
