// Path checks shared by the package loader and the validator (private to kiln::task).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::task::detail {

// Splits a package-relative path on '/', dropping empty and "." parts. Absolute paths and ".." are
// errors: nothing in a package may name a file outside it.
Result<std::vector<std::string>> path_components(std::string_view path);

}  // namespace kiln::task::detail
