// The promotion rules of the registry (DESIGN §7) and the entry a promoted kernel gets. Private to
// libs/registry: Registry::promote applies them.
#pragma once

#include <string>

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
// The entry for `r` promoted as `id`, its source (sha256 `sha`) stored at `source_path`.
KernelEntry entry_for(const proto::PromoteRequest& r, const std::string& id, const std::string& language,
                      const std::string& source_path, const std::string& sha);

}  // namespace kiln::registry::detail
