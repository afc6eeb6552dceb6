// The schemas are header-only (fields() lists); this unit checks that every public header compiles
// alone and instantiates each codec once so template errors surface here, not in a service.
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"

namespace kiln::proto {
namespace {
[[maybe_unused]] void instantiate_all() {
  (void)decode<Ready>("");
  (void)decode<Job>("");
  (void)decode<ResultMsg>("");
  (void)decode<Submit>("");
  (void)decode<Ack>("");
  (void)decode<Request>("");
  (void)decode<Reply>("");
  (void)decode<Disconnect>("");
  (void)decode<IngestRequest>("");
  (void)decode<CampaignStart>("");
  (void)decode<ProposalRequest>("");
  (void)decode<CompileRequest>("");
  (void)decode<TestRequest>("");
  (void)decode<ScoreResult>("");
  (void)decode<DeadLetter>("");
  (void)decode<PromoteRequest>("");
  (void)decode<PromoteOutcome>("");
  (void)decode<BrokerStatus>("");
  (void)decode<CampaignList>("");
  (void)decode<BestPrograms>("");
  (void)encode(Ready{});
  (void)encode(ResultMsg{});
  (void)encode(PromoteRequest{});
  (void)encode(BestPrograms{});
}
}  // namespace
}  // namespace kiln::proto
