// Profiler feedback for a correct CUDA verdict (profiling.h): the evaluation child once more, under Nsight
// Compute, calling only the candidate.
#pragma once

#include "child.h"
#include "kiln/proto/payloads.h"
#include "kiln/tester/profiling.h"

namespace kiln::tester {

// Fills report.profile and profile_summary when `report` is a correct verdict of a CUDA tester that
// profiles with ncu and `choice` does not rule it out; any trouble is a line in profile_summary.
void profile(const EvalChild& child, const ScratchFiles& files, proto::TestReport& report, const ProfileChoice& choice,
             int slot);

}  // namespace kiln::tester
