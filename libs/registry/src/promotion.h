// The promotion rules of the registry (DESIGN §7) and the entry a promoted kernel gets. Private to
// libs/registry: Registry::promote applies them.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/proto/payloads.h"
#include "kiln/registry/registry.h"

namespace kiln::registry::detail {

// A request the registry can hold: a known backend, op and dtype names, the source's extension. A refusal
// is kInvalidArgument.
Status check_request(const proto::PromoteRequest& r);
// Verified, measured and confirmed on the target device, and both measurements (every case) at least
// `min_speedup`, their interval's lower bound included. A refusal is kFailedPrecondition with the reason.
Status check_rules(const proto::PromoteRequest& r, double min_speedup);
// A promotion that would only copy what the registry holds, judged against the entries of the same op,
// dtype, language, target and shape (their sources read from `dir`):
//   - a duplicate (kAlreadyExists, "duplicate of <id>: ..."): the same normalized source, template
//     parameters included (they are #define lines of the stored source);
//   - not measurably faster (kFailedPrecondition): the confirmation's 95 % interval lower bound must be
//     above the upper bound of the best registered entry's interval (its point speedup when it has none).
//     Two intervals that overlap are within noise of each other.
Status check_not_a_copy(const std::vector<KernelEntry>& entries, const std::string& dir, const proto::PromoteRequest& r,
                        const std::string& language, const std::string& source,
                        const std::map<std::string, int64_t>& shape);
// The entry for `r` promoted as `id`, its source (sha256 `sha`) stored at `source_path`.
KernelEntry entry_for(const proto::PromoteRequest& r, const std::string& id, const std::string& language,
                      const std::string& source_path, const std::string& sha);

}  // namespace kiln::registry::detail
