#include "kiln/llm_bridge/metrics.h"

namespace kiln::llm_bridge {

prometheus::Family<prometheus::Counter>& llm_requests_family(prometheus::Registry& registry) {
  // prometheus-cpp hands back the registered family when the name, help and labels are the same.
  return prometheus::BuildCounter()
      .Name("kiln_llm_requests_total")
      .Help(
          "Proposer requests by model and outcome: per proposal for the tuner (ok | error), per HTTP attempt for "
          "LLMs (ok | rate_limited | server_error | timeout | error)")
      .Register(registry);
}

prometheus::Family<prometheus::Counter>& llm_tokens_family(prometheus::Registry& registry) {
  return prometheus::BuildCounter()
      .Name("kiln_llm_tokens_total")
      .Help("LLM tokens used, from the replies' usage, by model and direction (prompt | completion)")
      .Register(registry);
}

}  // namespace kiln::llm_bridge
