// What a build's output says: the resources ptxas reports for its kernels, and the log cut to what a
// reader (the scorer, an LLM's next prompt) needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::compiler {

// Resource usage reported by `ptxas -v`, the maximum over the kernels of a build; -1 where unknown.
struct PtxasUsage {
  int64_t registers = -1;     // per thread
  int64_t shared_bytes = -1;  // static shared memory per block
  int64_t spill_bytes = -1;   // spill stores + spill loads
  int64_t stack_bytes = -1;   // stack frame
};
PtxasUsage parse_ptxas_usage(std::string_view log);

// A build log cut to `max_bytes` around what matters: it starts a couple of lines before the first error
// (when there is one) and ends with "[... N bytes dropped]" when cut.
std::string trim_log(std::string_view log, size_t max_bytes);

}  // namespace kiln::compiler
