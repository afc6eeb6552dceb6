// The llm-bridge's metric families, each named and described in one place.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

namespace kiln::llm_bridge {

// kiln_llm_requests_total{model, outcome}: per proposal for the tuner (ok | error), per HTTP attempt for
// LLMs (ok | rate_limited | server_error | timeout | error). The handler and the LLM proposer count into
// the same family of a registry; whichever asks first registers it.
prometheus::Family<prometheus::Counter>& llm_requests_family(prometheus::Registry& registry);

// kiln_llm_tokens_total{model, direction}: tokens from the replies' usage (prompt | completion).
prometheus::Family<prometheus::Counter>& llm_tokens_family(prometheus::Registry& registry);

}  // namespace kiln::llm_bridge
