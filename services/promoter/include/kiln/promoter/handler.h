// The "promote" service: a PromoteRequest in, a PromoteOutcome for the scorer out. A refusal by the rules is
// the kernel's own failure (promoted = false, with the reason); trouble writing the registry is given back,
// a registry that cannot be read is dead-lettered (messaging::outcome_for).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "kiln/core/status.h"
#include "kiln/messaging/handler.h"
#include "kiln/proto/wire.h"
#include "kiln/registry/registry.h"
#include "kiln/service/service.h"

namespace kiln::promoter {

struct PromoterOptions {
  std::string registry_dir = "kernel_registry";  // relative paths resolve against the working directory
  double min_speedup = 1.10;
};

class PromoteHandler {
 public:
  // `metrics` may be null (a private registry is used then).
  static Result<std::unique_ptr<PromoteHandler>> create(const PromoterOptions& options,
                                                        std::shared_ptr<prometheus::Registry> metrics);

  // Thread-safe: the registry serializes writers with a file lock.
  messaging::JobOutcome handle(const proto::Job& job);

  const registry::Registry& registry() const { return registry_; }

 private:
  PromoteHandler(registry::Registry registry, double min_speedup, std::shared_ptr<prometheus::Registry> metrics);

  registry::Registry registry_;
  double min_speedup_;
  std::shared_ptr<prometheus::Registry> metrics_;
  prometheus::Counter* promoted_ = nullptr;  // kiln_promotions_total{outcome=...}
  prometheus::Counter* refused_ = nullptr;
  prometheus::Counter* errors_ = nullptr;
};

// Handler factory for services/promoter/main.cc: promoter.registry_dir and promoter.min_speedup from the
// config, one slot (the registry has a single writer anyway).
Result<service::ServiceHandlers> make_promote_handlers(const service::ServiceContext& ctx);

}  // namespace kiln::promoter
