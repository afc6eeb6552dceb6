// Dead letters: the broker's word that a job of this scorer's campaigns was attempted max_attempts times
// and given up. A job that killed every worker it met still ends its candidate, so the campaign never
// stalls. One that workers kept giving back, naming a fault of their own side (the reference does not
// build, the evaluator cannot run the task), ends it too, but not evaluated: that fault is never scored
// against it. The dead job's payload is one of the requests this scorer's campaigns send (propose,
// compile, test, promote) or a score job of its own.
#pragma once

#include <string_view>

#include "follow_ups.h"
#include "kiln/core/status.h"
#include "promotions.h"
#include "results.h"

namespace kiln::scorer {

class DeadLetters {
 public:
  DeadLetters(Results& results, Promotions& promotions) : results_(results), promotions_(promotions) {}

  // A "dead" payload (proto::DeadLetter).
  Status on_dead(std::string_view job_id, std::string_view payload, Effects& fx);

 private:
  Results& results_;
  Promotions& promotions_;
};

}  // namespace kiln::scorer
