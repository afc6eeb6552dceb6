// kiln-compiler: the "compile" service (DESIGN §1, §4). Everything but wiring lives in the handler library.
#include "kiln/compiler/handler.h"
#include "kiln/service/service.h"

int main(int argc, char** argv) {
  kiln::service::ServiceSpec spec;
  spec.name = "compiler";
  spec.service = "compile";
  spec.make = kiln::compiler::make_compile_handlers;
  spec.default_metrics_port = kiln::config::CompilerConfig{}.metrics_port;
  return kiln::service::run_worker_service(argc, argv, spec);
}
