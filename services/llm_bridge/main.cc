// kiln-llm-bridge: the "propose" service (DESIGN §1). Everything but wiring lives in the handler library.
#include "kiln/llm_bridge/handler.h"
#include "kiln/service/service.h"

int main(int argc, char** argv) {
  kiln::service::ServiceSpec spec;
  spec.name = "llm-bridge";
  spec.service = "propose";
  spec.make = kiln::llm_bridge::make_propose_handlers;
  spec.default_metrics_port = kiln::config::ProposerConfig{}.metrics_port;
  return kiln::service::run_worker_service(argc, argv, spec);
}
