// PyTorch on the machine that runs the tests: whether the system's python3 has torch (`make deps` installs
// Debian's python3-torch), for the tests whose reference is a PyTorch module. Test-only.
#pragma once

#include <cstdlib>
#include <string>

namespace kiln::testing {

inline constexpr const char* kSystemPython = "/usr/bin/python3";

// Whether kSystemPython imports torch; asked once per process (the import takes seconds).
inline bool have_torch() {
  static const bool have =
      std::system((std::string(kSystemPython) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  return have;
}

}  // namespace kiln::testing
