// The Python this tester gives its evaluation children for tasks with a PyTorch module (reference.py:
// kiln/eval/torch_module.h). Found once, when the tester starts: importing torch takes seconds.
#pragma once

#include <string>

namespace kiln::tester {

struct TorchPython {
  std::string path;     // an absolute path; empty: none here
  std::string version;  // torch.__version__
  std::string why_none;
};

// `configured` (tester.python): a path, or "" for the first of /usr/bin/python3 and python3 on PATH that
// imports torch, or "off" for none.
TorchPython find_torch_python(const std::string& configured);

}  // namespace kiln::tester
