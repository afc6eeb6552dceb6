// kiln-tester: the "test.<backend>" service (DESIGN §1, §5). Everything but wiring lives in the handler
// library; the evaluation itself runs in the kiln-eval child installed beside this executable.
#include "kiln/service/service.h"
#include "kiln/tester/handler.h"

int main(int argc, char** argv) {
  kiln::service::ServiceSpec spec;
  spec.name = "tester";
  spec.service = "test.cpu";  // the handlers name the service from tester.backend
  spec.make = kiln::tester::make_test_handlers;
  spec.default_metrics_port = kiln::config::TesterConfig{}.metrics_port;
  return kiln::service::run_worker_service(argc, argv, spec);
}
