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

// A KernelBench-format problem both the evaluator's and the importer's tests use: relu(Linear(x)), whose
// weight and bias a kernel gets as `param:` inputs; the size constants are the problem's own sizes.
inline std::string linear_relu_module(int batch_size, int in_features, int out_features) {
  return "import torch\nimport torch.nn as nn\n\nbatch_size = " + std::to_string(batch_size) +
         "\nin_features = " + std::to_string(in_features) + "\nout_features = " + std::to_string(out_features) +
         R"PY(


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
)PY";
}

}  // namespace kiln::testing
