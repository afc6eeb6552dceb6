#include <catch2/catch.hpp>
#include <regex>
#include <tuple>

#include "kiln/report/report.h"

using kiln::report::escape_html;
using kiln::report::line_diff;
using kiln::report::render_html;

namespace {

kiln::proto::Program program(const std::string& id, const std::string& parent, double speedup, const std::string& body,
                             const std::string& cell, const std::string& status = "ok") {
  kiln::proto::Program p;
  p.id = id;
  p.parent_id = parent;
  p.code = "#include <x>\n// [EVOLVE_START]\n" + body + "// [EVOLVE_END]\nint tail;\n";
  p.timestamp = static_cast<double>(id.back());
  p.eval.status = status;
  p.eval.perf_score = status == "ok" ? 5 : 1;
  p.eval.runtime_improvement = status == "ok" ? speedup : -1;
  p.eval.combined_score = p.eval.perf_score + (status == "ok" ? speedup : 0);
  p.eval.runtime_stats = {{"speedup_lo", speedup * 0.9}, {"speedup_hi", speedup * 1.1}};
  p.eval.eval_log = status == "ok" ? "timing: fine" : "error: expected ';' <here>";
  p.eval.profiler_data = {{"registers", 32}, {"spill_bytes", 0}};
  if (status == "ok")
    p.eval.profiler_data.insert(
        {{"ncu_kernels", 1}, {"ncu_dram_pct", 81.2}, {"ncu_sm_pct", 12}, {"ncu_limiter", 1}, {"ncu_profile_s", 2.5}});
  p.metadata = {{"cell", cell}, {"island", "0"}, {"proposer", "tuner"}, {"device", "Test CPU"}};
  return p;
}

kiln::report::ReportInput sample() {
  kiln::report::ReportInput in;
  auto& c = in.best.campaign;
  c.campaign_id = "scale-abc";
  c.task_name = "scale<&>";
  c.task_id = "0123456789abcdef";
  c.backend = kiln::proto::Backend::kCpu;
  c.state = "done";
  c.budget = 2;
  c.scored = 3;
  c.correct = 2;
  c.best_program_id = "scale-abc/p2";
  c.best_speedup = 3.5;
  c.best_speedup_lo = 3.1;
  c.best_speedup_hi = 3.9;
  c.promoted = {"cpp_scale_x_fp32_n4_v1"};
  c.promotion_notes = {"scale-abc/p1: speedup 1.02 < 1.10"};
  // Best first, as the scorer answers.
  in.best.programs = {
      program("scale-abc/p2", "scale-abc/p0", 3.5, "fast();\n", "memory=1,compute=2,parallelism=0"),
      program("scale-abc/p0", "", 1.5, "slow();\n", "memory=0,compute=0,parallelism=0"),
      program("scale-abc/p1", "scale-abc/p0", 0, "broken(\n", "memory=0,compute=1,parallelism=0", "build_failed")};
  in.best.programs[0].template_parameters = {{"THREADS", "2"}};
  in.best.programs[1].template_parameters = {{"THREADS", "1"}};
  // p2 was timed beside PyTorch eager at two shapes: 2.0x [1.8, 2.2] and 0.5x [0.4, 0.6].
  for (auto [speedup, lo, hi] : {std::tuple{2.0, 1.8, 2.2}, std::tuple{0.5, 0.4, 0.6}}) {
    kiln::proto::CaseSpeedup cs;
    kiln::proto::BaselineTiming b;
    b.name = "torch_eager";
    b.speedup = speedup;
    b.speedup_lo = lo;
    b.speedup_hi = hi;
    cs.baselines.push_back(b);
    in.best.programs[0].eval.cases.push_back(cs);
  }
  in.generated_at = "2026-12-01T00:00:00Z";
  return in;
}

}  // namespace

TEST_CASE("escape_html leaves no markup through", "[report]") {
  CHECK(escape_html("<script>a&b \"c\" 'd'</script>") ==
        "&lt;script&gt;a&amp;b &quot;c&quot; &#39;d&#39;&lt;/script&gt;");
}

TEST_CASE("line_diff marks kept, removed and added lines", "[report]") {
  CHECK(line_diff("a\nb\nc\n", "a\nx\nc\n") == std::vector<std::string>{"  a", "- b", "+ x", "  c"});
  CHECK(line_diff("", "n\n") == std::vector<std::string>{"+ n"});
  CHECK(line_diff("same\n", "same\n") == std::vector<std::string>{"  same"});
}

TEST_CASE("the report has every section with the campaign's numbers, escaped", "[report]") {
  const std::string html = render_html(sample());
  for (const char* id : {"campaign", "progress", "map", "lineage", "candidates", "registry"})
    CHECK(html.find(std::string("<section id=\"") + id + "\"") != std::string::npos);
  CHECK(html.find("scale&lt;&amp;&gt;") != std::string::npos);  // the task name, escaped
  CHECK(html.find("scale<&>") == std::string::npos);
  CHECK(html.find("<div id=\"best-speedup\">scale-abc/p2  3.50x [3.10, 3.90]</div>") != std::string::npos);
  CHECK(html.find("<div id=\"scored\">3 (2 correct)</div>") != std::string::npos);
  // Every candidate has a row with its verdict; the failed one shows its reason, escaped.
  const std::regex row(R"re(<tr id="p-scale-abc-p[0-9]" data-status="([a-z_]+)")re");
  std::vector<std::string> statuses;
  for (std::sregex_iterator it(html.begin(), html.end(), row), end; it != end; ++it) statuses.push_back((*it)[1]);
  CHECK(statuses == std::vector<std::string>{"ok", "ok", "build_failed"});
  CHECK(html.find("error: expected &#39;;&#39; &lt;here&gt;") != std::string::npos);
  // Three filled cells on island 0; the lineage runs p0 -> p2 with the diff of the region.
  size_t cells = 0;
  for (size_t at = html.find("class=\"cell\""); at != std::string::npos; at = html.find("class=\"cell\"", at + 1))
    ++cells;
  CHECK(cells == 3);
  const auto p0 = html.find("<li data-step=\"0\"><a href=\"#p-scale-abc-p0\">");
  const auto p2 = html.find("<li data-step=\"1\"><a href=\"#p-scale-abc-p2\">");
  CHECK(p0 != std::string::npos);
  CHECK(p2 != std::string::npos);
  CHECK(p0 < p2);
  CHECK(html.find("<span class=\"del\">- slow();</span>") != std::string::npos);
  CHECK(html.find("<span class=\"add\">+ fast();</span>") != std::string::npos);
  CHECK(html.find("2 lines changed in the editable regions; parameters THREADS 1 &rarr; 2") != std::string::npos);
  // The promoted kernel is listed although its entry is not readable here, with the notes.
  CHECK(html.find("cpp_scale_x_fp32_n4_v1") != std::string::npos);
  CHECK(html.find("entry not readable here") != std::string::npos);
  CHECK(html.find("scale-abc/p1: speedup 1.02 &lt; 1.10") != std::string::npos);
  CHECK(html.find("promotion bar 1.10x") != std::string::npos);
  CHECK(html.find("<td class=\"profile\">dram 81 %, sm 12 %: memory bound (2.5 s)</td>") != std::string::npos);
  CHECK(html.find("<td class=\"profile\">-</td>") != std::string::npos);  // the build failure has none
  CHECK(html.find("http") == std::string::npos);                          // nothing to fetch
  // The speedup over each baseline: the geometric mean over the cases with the widest interval; "-" without.
  CHECK(html.find("<td class=\"baselines\">torch_eager 1.00x [0.40, 2.20]</td>") != std::string::npos);
  CHECK(html.find("<td class=\"baselines\">-</td>") != std::string::npos);
}

TEST_CASE("a campaign without programs still renders", "[report]") {
  kiln::report::ReportInput in;
  in.best.campaign.campaign_id = "empty";
  const std::string html = render_html(in);
  CHECK(html.find("No program has a cell yet.") != std::string::npos);
  CHECK(html.find("No best program yet.") != std::string::npos);
  CHECK(html.find("Nothing was promoted.") != std::string::npos);
}

TEST_CASE("a campaign with programs not evaluated says how many and why", "[report]") {
  kiln::report::ReportInput in = sample();
  const std::string quiet = render_html(in);
  CHECK(quiet.find("id=\"not-evaluated\"") == std::string::npos);
  in.best.campaign.not_evaluated = 4;
  in.best.campaign.last_not_evaluated = "not evaluated: propose: LLM unavailable: Connection (dead after 3 attempts)";
  const std::string html = render_html(in);
  CHECK(html.find("<div id=\"not-evaluated\">4 program(s); latest: not evaluated: propose: LLM unavailable: "
                  "Connection (dead after 3 attempts)</div>") != std::string::npos);
}
