#include "kiln/core/compress.h"

#include <zlib.h>

namespace kiln {

std::string deflate_bytes(std::string_view data) {
  uLongf bound = compressBound(static_cast<uLong>(data.size()));
  std::string out(bound, '\0');
  int rc = compress2(reinterpret_cast<Bytef*>(out.data()), &bound, reinterpret_cast<const Bytef*>(data.data()),
                     static_cast<uLong>(data.size()), Z_DEFAULT_COMPRESSION);
  if (rc != Z_OK) return {};  // only out of memory; an empty result is never a valid stream
  out.resize(bound);
  return out;
}

Result<std::string> inflate_bytes(std::string_view data, size_t size, size_t max_bytes) {
  if (size > max_bytes)
    return invalid_argument("deflated content of " + std::to_string(size) + " bytes is over the bound of " +
                            std::to_string(max_bytes));
  std::string out(size, '\0');
  uLongf produced = static_cast<uLongf>(size);
  uLong consumed = static_cast<uLong>(data.size());
  int rc = uncompress2(reinterpret_cast<Bytef*>(out.data()), &produced, reinterpret_cast<const Bytef*>(data.data()),
                       &consumed);
  if (rc != Z_OK) return invalid_argument("deflated content does not inflate (zlib " + std::to_string(rc) + ")");
  if (produced != size || consumed != data.size())
    return invalid_argument("deflated content is not the " + std::to_string(size) + " bytes it says");
  return out;
}

}  // namespace kiln
