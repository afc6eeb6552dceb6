// Deflate (zlib) for built objects on the wire: a kernel library is mostly ELF padding and tables, and
// shrinks several times.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kiln/core/status.h"

namespace kiln {

// zlib-wrapped deflate of `data` at the default level.
std::string deflate_bytes(std::string_view data);

// Inflates `data`, which must give exactly `size` bytes and `size` at most `max_bytes` (bounded before a byte
// is inflated, so a small message cannot make a reader allocate without limit). kInvalidArgument otherwise.
Result<std::string> inflate_bytes(std::string_view data, size_t size, size_t max_bytes);

}  // namespace kiln
