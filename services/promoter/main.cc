// kiln-promoter: the "promote" service (DESIGN §1, §7). Everything but wiring lives in the handler library.
#include "kiln/promoter/handler.h"
#include "kiln/service/service.h"

int main(int argc, char** argv) {
  kiln::service::ServiceSpec spec;
  spec.name = "promoter";
  spec.service = "promote";
  spec.make = kiln::promoter::make_promote_handlers;
  spec.default_metrics_port = kiln::config::PromoterConfig{}.metrics_port;
  return kiln::service::run_worker_service(argc, argv, spec);
}
