#include "kiln/tester/torch_python.h"

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kiln/core/strings.h"

namespace kiln::tester {
namespace {

// Runs `python` once: its absolute path and torch's version, or why not.
TorchPython probe(const std::string& python) {
  TorchPython found;
  const std::string command = "'" + python +
                              "' -I -c 'import sys, torch; print(sys.executable); print(torch.__version__)' "
                              "2>/dev/null";
  if (python.find('\'') != std::string::npos) {
    found.why_none = "tester.python: a path with a quote in it";
    return found;
  }
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    found.why_none = "cannot run " + python;
    return found;
  }
  std::string out;
  char buf[256];
  while (out.size() < 4096 && std::fgets(buf, sizeof buf, pipe)) out += buf;
  const int rc = ::pclose(pipe);
  const size_t newline = out.find('\n');
  if (rc != 0 || newline == std::string::npos || out.empty() || out[0] != '/') {
    found.why_none = python + " cannot import torch";
    return found;
  }
  found.path = out.substr(0, newline);
  found.version = out.substr(newline + 1);
  while (!found.version.empty() && (found.version.back() == '\n' || found.version.back() == '\r'))
    found.version.pop_back();
  return found;
}

}  // namespace

TorchPython find_torch_python(const std::string& configured) {
  if (configured == "off") return {"", "", "tester.python is off"};
  if (!configured.empty()) return probe(configured);
  TorchPython last;
  for (const char* python : {"/usr/bin/python3", "python3"}) {
    last = probe(python);
    if (!last.path.empty()) return last;
  }
  last.why_none = "no python3 with torch (/usr/bin/python3, python3 on PATH); tester.python names one";
  return last;
}

}  // namespace kiln::tester
