// A campaign as one self-contained HTML page: no network, no external file (inline CSS, SVG and a little
// script), readable from disk, as a CI artifact or from the scorer's HTTP port. Sections, each an element
// with a fixed id that tests and people can find: #campaign (the header), #progress (best speedup over
// the candidates scored, with the promotion bar and the promoted kernels), #map (the MAP-Elites cells per
// island, colour = best fitness), #lineage (the best kernel's parent chain, each step with its speedup and
// the diff of its editable regions), #candidates (every candidate: verdict, speedup and interval, reason,
// build resources, evaluation log) and #registry (what the campaign promoted).
//
// The page's script marks <body data-ready="1"> when it has run to the end, and counts script errors in
// data-errors (window.onerror), so a headless browser can tell a page that rendered from one that broke.
#pragma once

#include <string>
#include <vector>

#include "kiln/proto/payloads.h"
#include "kiln/registry/registry.h"

namespace kiln::report {

struct ReportInput {
  // Every scored program of the campaign (the scorer's `best` query with a large `top`), best first.
  proto::BestPrograms best;
  // Registry entries of the campaign's promoted kernels, when the registry can be read; the kernel ids in
  // best.campaign.promoted are listed either way.
  std::vector<registry::KernelEntry> entries;
  double promotion_bar = 1.10;  // promoter.min_speedup
  std::string generated_at;     // ISO-8601 UTC
};

// The most programs a report lists (the best ones): a bound on the page and on the query behind it.
inline constexpr int64_t kMaxReportPrograms = 2000;

std::string render_html(const ReportInput& input);

// The input for a campaign the scorer answered for: the registry entries of its promoted kernels read
// from `registry_dir` (those that cannot be read are left out; the page lists their ids anyway), the
// promotion bar, and the time now.
ReportInput make_input(proto::BestPrograms best, const std::string& registry_dir, double promotion_bar);

// Line diff of two texts (longest common subsequence), as unified-style lines: "  same", "- old", "+ new".
// Inputs of more than kMaxDiffLines lines each are compared as wholes (one removal, one addition).
inline constexpr size_t kMaxDiffLines = 2000;
std::vector<std::string> line_diff(const std::string& before, const std::string& after);

// Text made safe inside HTML elements and attribute values.
std::string escape_html(const std::string& text);

}  // namespace kiln::report
