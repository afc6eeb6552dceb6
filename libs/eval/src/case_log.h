// What the log says about one timed case (run_protocol(), driver.cc), internal: how far its interval was
// widened, and where its samples spread (order, blocks, placements).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "kiln/eval/detail/protocol.h"
#include "kiln/eval/device.h"
#include "kiln/proto/payloads.h"

namespace kiln::eval::detail {

// The candidate's (0) and the reference's (1) placement in each timing block (Device::placement).
using Placements = std::array<std::vector<std::string>, 2>;

// The widening of the interval for reproducibility and placement, when there was any, and the samples'
// own interval before it.
void log_widening(const Device& device, const std::string& shape, const Allowance& cand, const Allowance& ref,
                  double samples_lo, double samples_hi);

// The medians, spreads and per-block medians of the candidate and the reference (`samples[0]`, `[1]`).
void log_case_spread(const Device& device, const std::string& shape, const proto::CaseTiming& timing,
                     const std::vector<std::vector<double>>& samples, const std::vector<size_t>& block_starts,
                     const Placements& placements);

}  // namespace kiln::eval::detail
