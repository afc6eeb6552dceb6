// Profiler feedback for the proposer: which correct CUDA verdicts get a run under Nsight Compute.
#pragma once

#include <string>
#include <string_view>

#include "kiln/proto/payloads.h"

namespace kiln::tester {

// What decides whether a correct CUDA verdict is profiled besides the verdict itself.
struct ProfileChoice {
  std::string_view scope = "all";  // TesterOptions::profile_scope
  double bar = 0;                  // the screening bar the measurement ran under (0: none)
  bool confirmation = false;
  bool wanted = true;  // TestRequest.want_profile: the proposer reads profiler feedback
};

// Why a correct CUDA verdict is not profiled, or empty when it is. A profile costs seconds of ncu replays;
// it is feedback for the proposer, worth those seconds for a kernel that may become the campaign's best.
// Never profiled: a candidate screened out on some case. With scope "contenders", also not: a candidate
// whose proposer reads no profile (the tuner), a confirmation (its candidate was profiled when first
// measured) and a candidate whose interval ends below the bar on some case (it cannot overtake the best the
// bar came from).
std::string why_not_profiled(const proto::TestReport& report, const ProfileChoice& choice = {});

}  // namespace kiln::tester
