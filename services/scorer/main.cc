// kiln-scorer: the "score" service (DESIGN §1, §6). Everything but wiring lives in the handler library.
#include "kiln/scorer/handler.h"
#include "kiln/service/service.h"

int main(int argc, char** argv) {
  kiln::service::ServiceSpec spec;
  spec.name = "scorer";
  spec.service = "score";
  spec.make = kiln::scorer::make_scorer_handlers;
  spec.default_metrics_port = kiln::config::ScorerConfig{}.metrics_port;
  return kiln::service::run_worker_service(argc, argv, spec);
}
