// kiln-task-ingest: the "ingest" service (DESIGN §1, §3). Everything but wiring lives in the handler library.
#include "kiln/service/service.h"
#include "kiln/task_ingest/handler.h"

int main(int argc, char** argv) {
  kiln::service::ServiceSpec spec;
  spec.name = "task-ingest";
  spec.service = "ingest";
  spec.make = kiln::task_ingest::make_ingest_handlers;
  spec.default_metrics_port = kiln::config::IngestConfig{}.metrics_port;
  return kiln::service::run_worker_service(argc, argv, spec);
}
