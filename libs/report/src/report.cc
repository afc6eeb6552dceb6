#include "kiln/report/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "kiln/core/strings.h"
#include "kiln/core/time.h"
#include "kiln/task/task.h"

namespace kiln::report {
namespace {

using proto::Program;

double stat(const Program& p, const char* key, double fallback = -1) {
  auto it = p.eval.runtime_stats.find(key);
  return it == p.eval.runtime_stats.end() ? fallback : it->second;
}

bool measured(const Program& p) { return p.eval.runtime_improvement > 0; }

std::string speedup_text(double s, double lo, double hi) {
  if (!(s > 0)) return "-";
  std::string out = format_value("%.2fx", s);
  if (lo > 0 && hi > 0) out += " [" + format_value("%.2f", lo) + ", " + format_value("%.2f", hi) + "]";
  return out;
}

// A program's speedup with its 95 % interval, "-" when it was not measured.
std::string program_speedup(const Program& p) {
  return speedup_text(p.eval.runtime_improvement, stat(p, "speedup_lo"), stat(p, "speedup_hi"));
}

// The program's speedup over each baseline timed beside it (torch_eager, cublas_sgemm ...): over the
// benchmark cases, the geometric mean and the widest interval, as for the reference; "-" without any.
std::string baselines_text(const Program& p) {
  std::map<std::string, registry::SpeedupSpan> by_name;
  for (const auto& c : p.eval.cases) {
    for (const auto& b : c.baselines) {
      if (b.speedup > 0) by_name[b.name].add(b.speedup, b.speedup_lo, b.speedup_hi);
    }
  }
  std::string out;
  for (const auto& [name, s] : by_name) {
    out += (out.empty() ? "" : "; ") + name + " " + speedup_text(s.geomean(), s.lo, s.hi);
  }
  return out.empty() ? "-" : out;
}

// Correct and timed: a point on the progress chart and a candidate for the best so far.
bool correct_and_measured(const Program& p) { return measured(p) && p.eval.perf_score == 5; }

std::string meta(const Program& p, const char* key) {
  auto it = p.metadata.find(key);
  return it == p.metadata.end() ? std::string() : it->second;
}

// The first line of an evaluation log that says why a candidate is not correct.
std::string reason_of(const Program& p) {
  if (p.eval.status == "ok") return "";
  std::istringstream in(p.eval.eval_log);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t") != std::string::npos)
      return line.size() > 160 ? line.substr(0, 157) + "..." : line;
  return p.eval.status;
}

std::string anchor(const std::string& program_id) {
  std::string out = "p-";
  for (char c : program_id) out.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
  return out;
}

std::string program_link(const std::string& id) {
  return "<a href=\"#" + anchor(id) + "\">" + escape_html(id) + "</a>";
}

// Fitness colour: from pale (worst) to deep (best) on a 0..1 scale.
std::string colour(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const int r = static_cast<int>(235 - 200 * t), g = static_cast<int>(240 - 120 * t),
            b = static_cast<int>(250 - 60 * t);
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

// "memory=2,compute=1,parallelism=3" -> {{"memory",2},...} in order.
std::vector<std::pair<std::string, int>> parse_cell(const std::string& cell) {
  std::vector<std::pair<std::string, int>> out;
  std::istringstream in(cell);
  for (std::string part; std::getline(in, part, ',');) {
    auto eq = part.find('=');
    if (eq == std::string::npos) continue;
    try {
      out.emplace_back(part.substr(0, eq), std::stoi(part.substr(eq + 1)));
    } catch (...) {
    }
  }
  return out;
}

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1180px;padding:16px 24px;color:#1d2330}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde3ec;padding-bottom:4px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eef1f5;vertical-align:top}
th{background:#f5f7fa;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px}.kv div:nth-child(odd){color:#5a6478}
.ok{color:#11813a}.bad{color:#b3261e}pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:360px;font-size:12px}
.diff .add{color:#11813a}.diff .del{color:#b3261e}.grids{display:flex;flex-wrap:wrap;gap:18px}
.island{border:1px solid #dde3ec;padding:8px;border-radius:4px}.muted{color:#5a6478}
svg text{font:11px system-ui,sans-serif}details summary{cursor:pointer}
)";

// The page's script: counts errors, lets a click on a map cell or a chart point open that candidate's row.
constexpr const char* kScript = R"(
window.onerror = function () { document.body.dataset.errors = String((+document.body.dataset.errors || 0) + 1); };
document.querySelectorAll('[data-program]').forEach(function (el) {
  el.addEventListener('click', function () {
    var row = document.getElementById(el.getAttribute('data-program'));
    if (!row) return;
    var d = row.querySelector('details'); if (d) d.open = true;
    row.scrollIntoView({block: 'center'});
  });
});
document.body.dataset.ready = '1';
)";

void header(std::ostringstream& h, const ReportInput& in, const std::vector<const Program*>& programs) {
  const proto::CampaignInfo& c = in.best.campaign;
  std::set<std::string> devices, models;
  for (const Program* p : programs) {
    if (auto d = meta(*p, "device"); !d.empty()) devices.insert(d);
    if (auto m = meta(*p, "model"); !m.empty()) models.insert(m);
  }
  auto join = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
    return out.empty() ? std::string("-") : out;
  };
  const double wall = c.finished_at > c.started_at ? c.finished_at - c.started_at : 0;
  h << "<section id=\"campaign\"><h1>Campaign " << escape_html(c.campaign_id) << "</h1><div class=\"kv\">";
  auto row = [&](const char* k, const std::string& v, const char* id = nullptr) {
    h << "<div>" << k << "</div><div" << (id ? std::string(" id=\"") + id + "\"" : "") << ">" << escape_html(v)
      << "</div>";
  };
  row("task", c.task_name + " (" + c.task_id.substr(0, 12) + ")");
  row("backend", std::string(proto::word_of(c.backend)));
  row("device", join(devices));
  row("state", c.state);
  row("budget", std::to_string(c.budget) + " proposals");
  row("scored", std::to_string(c.scored) + " (" + std::to_string(c.correct) + " correct)", "scored");
  row("proposer", c.proposer.empty() ? "-" : c.proposer);
  row("model", join(models));
  row("tokens", std::to_string(c.prompt_tokens) + " prompt, " + std::to_string(c.completion_tokens) + " completion");
  row("wall time", wall > 0 ? format_value("%.1f s", wall) : "-");
  row("stop", c.stop_reason.empty() ? (c.state == "done" ? "budget spent" : "running") : c.stop_reason);
  if (c.not_evaluated > 0)
    row("not evaluated", std::to_string(c.not_evaluated) + " program(s); latest: " + c.last_not_evaluated,
        "not-evaluated");
  row("best",
      (c.best_program_id.empty() ? "-" : c.best_program_id) + "  " +
          speedup_text(c.best_speedup, c.best_speedup_lo, c.best_speedup_hi),
      "best-speedup");
  row("cells filled", std::to_string(c.cells_filled));
  row("generated", in.generated_at);
  h << "</div></section>\n";
}

// Best speedup so far over the candidates in the order they were scored; every measured candidate as a
// point, the promotion bar as a dashed line, promoted programs ringed.
void progress(std::ostringstream& h, const ReportInput& in, std::vector<const Program*> order) {
  std::sort(order.begin(), order.end(), [](const Program* a, const Program* b) {
    return a->timestamp != b->timestamp ? a->timestamp < b->timestamp : a->iteration_found < b->iteration_found;
  });
  std::set<std::string> promoted_programs;
  for (const auto& e : in.entries) promoted_programs.insert(e.program_id);
  double top = in.promotion_bar;
  for (const Program* p : order)
    if (correct_and_measured(*p)) top = std::max(top, p->eval.runtime_improvement);
  top *= 1.1;
  const double W = 900, H = 260, L = 50, B = 30, T = 10;
  const size_t n = std::max<size_t>(order.size(), 1);
  auto x = [&](size_t i) {
    return L + (W - L - 10) * (n == 1 ? 0.5 : static_cast<double>(i) / static_cast<double>(n - 1));
  };
  auto y = [&](double s) { return T + (H - T - B) * (1 - std::clamp(s, 0.0, top) / top); };
  h << "<section id=\"progress\"><h2>Best speedup over the candidates scored</h2>"
    << "<svg viewBox=\"0 0 " << W << " " << H << "\" width=\"100%\" role=\"img\">";
  h << "<line x1=\"" << L << "\" y1=\"" << y(0) << "\" x2=\"" << W - 10 << "\" y2=\"" << y(0)
    << "\" stroke=\"#8a94a6\"/>";
  for (double t : {0.0, top / 2, top / 1.1}) {
    h << "<text x=\"4\" y=\"" << y(t) + 4 << "\">" << format_value("%.2fx", t) << "</text>";
  }
  h << "<line x1=\"" << L << "\" y1=\"" << y(in.promotion_bar) << "\" x2=\"" << W - 10 << "\" y2=\""
    << y(in.promotion_bar) << "\" stroke=\"#b3261e\" stroke-dasharray=\"5 4\"/>"
    << "<text x=\"" << W - 200 << "\" y=\"" << y(in.promotion_bar) - 4 << "\" fill=\"#b3261e\">promotion bar "
    << format_value("%.2fx", in.promotion_bar) << "</text>";
  std::string path;
  double best = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const Program& p = *order[i];
    if (correct_and_measured(p)) best = std::max(best, p.eval.runtime_improvement);
    if (best > 0)
      path += (path.empty() ? "M" : " L") + format_value("%.1f", x(i)) + "," + format_value("%.1f", y(best));
  }
  if (!path.empty())
    h << "<path id=\"best-line\" d=\"" << path << "\" fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"2\"/>";
  for (size_t i = 0; i < order.size(); ++i) {
    const Program& p = *order[i];
    const bool ok = p.eval.perf_score == 5;
    const double s = measured(p) ? p.eval.runtime_improvement : 0;
    h << "<circle cx=\"" << format_value("%.1f", x(i)) << "\" cy=\"" << format_value("%.1f", y(s))
      << "\" r=\"4\" fill=\"" << (ok ? "#1f5fbf" : "#c9ced8") << "\" data-program=\"" << anchor(p.id)
      << "\" style=\"cursor:pointer\">"
      << "<title>" << escape_html(p.id) << ": " << escape_html(p.eval.status) << " " << program_speedup(p)
      << "</title></circle>";
    if (promoted_programs.count(p.id))
      h << "<circle class=\"promoted\" cx=\"" << format_value("%.1f", x(i)) << "\" cy=\"" << format_value("%.1f", y(s))
        << "\" r=\"8\" fill=\"none\" stroke=\"#11813a\" stroke-width=\"2\"><title>promoted</title></circle>";
  }
  h << "<text x=\"" << L << "\" y=\"" << H - 8 << "\">candidates in the order scored (" << order.size()
    << "); blue: correct, grey: not; green ring: promoted; line: best so far</text></svg></section>\n";
}

// One grid per island; dims after the first two become small multiples.
void map_section(std::ostringstream& h, const std::vector<const Program*>& programs) {
  struct Elite {
    const Program* p = nullptr;
  };
  std::map<std::string, std::map<std::string, Elite>> islands;  // island -> cell -> best program
  double lo = 1e300, hi = -1e300;
  std::vector<std::string> dims;
  for (const Program* p : programs) {
    const std::string cell = meta(*p, "cell");
    if (cell.empty()) continue;
    std::string island = meta(*p, "island");
    if (island.empty()) island = "0";
    Elite& e = islands[island][cell];
    if (!e.p || p->eval.combined_score > e.p->eval.combined_score) e.p = p;
    lo = std::min(lo, p->eval.combined_score);
    hi = std::max(hi, p->eval.combined_score);
    if (dims.empty())
      for (const auto& [name, v] : parse_cell(cell)) dims.push_back(name);
  }
  h << "<section id=\"map\"><h2>MAP-Elites map</h2>";
  if (islands.empty() || dims.size() < 2) {
    h << "<p class=\"muted\">No program has a cell yet.</p></section>\n";
    return;
  }
  h << "<p class=\"muted\">Each square is a cell (" << escape_html(dims[0]) << " across, " << escape_html(dims[1])
    << " down" << (dims.size() > 2 ? ", one grid per value of the others" : "")
    << "); colour = the best fitness (perf_score + speedup) in it, from " << format_value("%.2f", lo) << " to "
    << format_value("%.2f", hi) << ". Click a cell for its elite.</p><div class=\"grids\">";
  constexpr int kLevels = 4, S = 26;
  for (const auto& [island, cells] : islands) {
    // Group the cells by the values of the dims past the first two.
    std::map<std::string, std::map<std::pair<int, int>, const Program*>> groups;
    for (const auto& [cell, e] : cells) {
      auto coords = parse_cell(cell);
      if (coords.size() < 2) continue;
      std::string rest;
      for (size_t i = 2; i < coords.size(); ++i)
        rest += (rest.empty() ? "" : ", ") + coords[i].first + "=" + std::to_string(coords[i].second);
      groups[rest][{coords[0].second, coords[1].second}] = e.p;
    }
    h << "<div class=\"island\" data-island=\"" << escape_html(island) << "\"><b>island " << escape_html(island)
      << "</b> <span class=\"muted\">" << cells.size() << " cells</span><div class=\"grids\">";
    for (const auto& [rest, grid] : groups) {
      h << "<div><div class=\"muted\">" << escape_html(rest.empty() ? "all" : rest) << "</div><svg width=\""
        << kLevels * S + 2 << "\" height=\"" << kLevels * S + 2 << "\">";
      for (int gy = 0; gy < kLevels; ++gy)
        for (int gx = 0; gx < kLevels; ++gx) {
          auto it = grid.find({gx, gy});
          const int px = 1 + gx * S, py = 1 + gy * S;
          if (it == grid.end()) {
            h << "<rect x=\"" << px << "\" y=\"" << py << "\" width=\"" << S - 2 << "\" height=\"" << S - 2
              << "\" fill=\"#fafbfc\" stroke=\"#e3e7ee\"/>";
            continue;
          }
          const Program& p = *it->second;
          const double t = hi > lo ? (p.eval.combined_score - lo) / (hi - lo) : 1.0;
          h << "<rect class=\"cell\" x=\"" << px << "\" y=\"" << py << "\" width=\"" << S - 2 << "\" height=\"" << S - 2
            << "\" fill=\"" << colour(t) << "\" stroke=\"#5a6478\" data-program=\"" << anchor(p.id)
            << "\" style=\"cursor:pointer\"><title>" << escape_html(dims[0]) << "=" << gx << ", "
            << escape_html(dims[1]) << "=" << gy << ": " << escape_html(p.id) << ", fitness "
            << format_value("%.3f", p.eval.combined_score) << ", " << program_speedup(p) << "</title></rect>";
        }
      h << "</svg></div>";
    }
    h << "</div></div>";
  }
  h << "</div></section>\n";
}

// The editable regions of a kernel file joined, or the whole file when it has none that parse.
std::string regions_text(const std::string& code) {
  auto bodies = task::region_bodies(code);
  if (!bodies.is_ok() || bodies->empty()) return code;
  std::string out;
  for (size_t i = 0; i < bodies->size(); ++i) {
    if (bodies->size() > 1) out += "// region " + std::to_string(i + 1) + "\n";
    out += (*bodies)[i];
    if (!out.empty() && out.back() != '\n') out.push_back('\n');
  }
  return out;
}

void lineage(std::ostringstream& h, const ReportInput& in, const std::vector<const Program*>& programs) {
  std::map<std::string, const Program*> by_id;
  for (const Program* p : programs) by_id[p->id] = p;
  h << "<section id=\"lineage\"><h2>Lineage of the best kernel</h2>";
  const std::string best_id = in.best.campaign.best_program_id.empty() && !programs.empty()
                                  ? programs.front()->id
                                  : in.best.campaign.best_program_id;
  auto it = by_id.find(best_id);
  if (it == by_id.end()) {
    h << "<p class=\"muted\">No best program yet.</p></section>\n";
    return;
  }
  std::vector<const Program*> chain;  // best first
  for (const Program* p = it->second; p && chain.size() <= by_id.size();) {
    chain.push_back(p);
    auto parent = by_id.find(p->parent_id);
    p = parent == by_id.end() ? nullptr : parent->second;
  }
  std::reverse(chain.begin(), chain.end());
  h << "<ol class=\"chain\">";
  for (size_t i = 0; i < chain.size(); ++i) {
    const Program& p = *chain[i];
    h << "<li data-step=\"" << i << "\">" << program_link(p.id) << " <span class=\"muted\">gen " << p.generation << ", "
      << escape_html(meta(p, "proposer")) << "</span> " << escape_html(p.eval.status) << " " << program_speedup(p);
    if (!p.template_parameters.empty()) {
      std::string params;
      for (const auto& [k, v] : p.template_parameters) params += (params.empty() ? "" : " ") + k + "=" + v;
      h << " <code>" << escape_html(params) << "</code>";
    }
    if (i > 0) {
      const auto diff = line_diff(regions_text(chain[i - 1]->code), regions_text(p.code));
      size_t changed = 0;
      for (const auto& l : diff) changed += l[0] != ' ';
      // The tuner changes parameters, not code: say which.
      std::string params;
      const auto& before = chain[i - 1]->template_parameters;
      for (const auto& [k, v] : p.template_parameters) {
        auto was = before.find(k);
        if (was == before.end() || was->second != v)
          params += (params.empty() ? "" : ", ") + escape_html(k) + " " +
                    (was == before.end() ? "-" : escape_html(was->second)) + " &rarr; " + escape_html(v);
      }
      h << "<details><summary>" << changed << " lines changed in the editable regions"
        << (params.empty() ? "" : "; parameters " + params) << "</summary><pre class=\"diff\">";
      for (const auto& l : diff) {
        const char* cls = l[0] == '+' ? "add" : l[0] == '-' ? "del" : "ctx";
        h << "<span class=\"" << cls << "\">" << escape_html(l) << "</span>\n";
      }
      h << "</pre></details>";
    }
    h << "</li>";
  }
  h << "</ol></section>\n";
}

// Nsight Compute's numbers of a candidate (profiler_data "ncu_*"), short: "dram 81 %, sm 12 %, occupancy
// 48 %: memory bound (0.9 s)"; "-" without a profile.
std::string profile_text(const Program& p) {
  auto get = [&](const char* key) {
    auto it = p.eval.profiler_data.find(std::string("ncu_") + key);
    return it == p.eval.profiler_data.end() ? -1.0 : it->second;
  };
  if (get("kernels") < 0) return "-";
  std::string out;
  for (const auto& [key, label] : {std::pair<const char*, const char*>{"dram_pct", "dram"},
                                   {"sm_pct", "sm"},
                                   {"occupancy_pct", "occupancy"},
                                   {"l2_hit_pct", "L2 hit"}}) {
    if (const double v = get(key); v >= 0)
      out += (out.empty() ? "" : ", ") + std::string(label) + " " + format_value("%.0f %%", v);
  }
  const double limiter = get("limiter");
  out += limiter == 1 ? ": memory bound" : limiter == 2 ? ": compute bound" : limiter == 0 ? ": latency bound" : "";
  if (const double s = get("profile_s"); s >= 0) out += " (" + format_value("%.1f s", s) + ")";
  return out;
}

void candidates(std::ostringstream& h, const std::vector<const Program*>& programs) {
  h << "<section id=\"candidates\"><h2>Every candidate (" << programs.size() << ")</h2><table><thead><tr>"
    << "<th>program</th><th>verdict</th><th>speedup [95 % interval]</th><th>vs baselines</th><th>reason</th>"
    << "<th>registers</th>"
    << "<th>shared</th><th>spills</th><th>profile (ncu)</th><th>parent</th></tr></thead><tbody>";
  auto resource = [](const Program& p, const char* key) {
    auto it = p.eval.profiler_data.find(key);
    return it == p.eval.profiler_data.end() ? std::string("-") : format_value("%.0f", it->second);
  };
  for (const Program* pp : programs) {
    const Program& p = *pp;
    const bool ok = p.eval.status == "ok";
    h << "<tr id=\"" << anchor(p.id) << "\" data-status=\"" << escape_html(p.eval.status) << "\"><td>"
      << escape_html(p.id) << "<details><summary>log</summary><pre>" << escape_html(p.eval.eval_log)
      << "</pre></details></td><td class=\"" << (ok ? "ok" : "bad") << "\">" << escape_html(p.eval.status)
      << "</td><td class=\"num speedup\">" << program_speedup(p) << "</td><td class=\"baselines\">"
      << escape_html(baselines_text(p)) << "</td><td>" << escape_html(reason_of(p)) << "</td><td class=\"num\">"
      << resource(p, "registers") << "</td><td class=\"num\">" << resource(p, "shared_bytes")
      << "</td><td class=\"num\">" << resource(p, "spill_bytes") << "</td><td class=\"profile\">"
      << escape_html(profile_text(p)) << "</td><td>" << (p.parent_id.empty() ? "-" : program_link(p.parent_id))
      << "</td></tr>";
  }
  h << "</tbody></table></section>\n";
}

void registry_section(std::ostringstream& h, const ReportInput& in) {
  const proto::CampaignInfo& c = in.best.campaign;
  h << "<section id=\"registry\"><h2>Registry entries</h2>";
  if (c.promoted.empty()) h << "<p class=\"muted\">Nothing was promoted.</p>";
  std::map<std::string, const registry::KernelEntry*> entry_of;
  for (const auto& e : in.entries) entry_of[e.kernel_id] = &e;
  if (!c.promoted.empty()) {
    h << "<table><thead><tr><th>kernel id</th><th>program</th><th>GPU</th><th>speedup [interval]</th>"
      << "<th>testers</th><th>created</th></tr></thead><tbody>";
    for (const auto& id : c.promoted) {
      auto it = entry_of.find(id);
      h << "<tr class=\"kernel\"><td>" << escape_html(id) << "</td>";
      if (it == entry_of.end()) {
        h << "<td colspan=\"5\" class=\"muted\">entry not readable here</td></tr>";
        continue;
      }
      const registry::KernelEntry& e = *it->second;
      h << "<td>" << program_link(e.program_id) << "</td><td>" << escape_html(e.target_gpu) << "</td><td class=\"num\">"
        << speedup_text(e.benchmark.speedup, e.speedup_lo, e.speedup_hi) << "</td><td>"
        << (e.merged.testers > 0
                ? std::to_string(e.merged.testers) + " tester(s), " + std::to_string(e.merged.devices) + " device(s)"
                : std::string("-"))
        << "</td><td>" << escape_html(e.created_at) << "</td></tr>";
    }
    h << "</tbody></table>";
  }
  if (!c.promotion_notes.empty()) {
    h << "<ul class=\"notes\">";
    for (const auto& n : c.promotion_notes) h << "<li>" << escape_html(n) << "</li>";
    h << "</ul>";
  }
  h << "</section>\n";
}

}  // namespace

std::string escape_html(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

ReportInput make_input(proto::BestPrograms best, const std::string& registry_dir, double promotion_bar) {
  ReportInput in;
  in.promotion_bar = promotion_bar;
  in.generated_at = iso8601_utc(wall_time_s());
  if (!registry_dir.empty() && !best.campaign.promoted.empty()) {
    if (auto reg = registry::Registry::open(registry_dir); reg.is_ok()) {
      for (const auto& id : best.campaign.promoted)
        if (auto e = reg->show(id); e.is_ok()) in.entries.push_back(std::move(e).value());
    }
  }
  in.best = std::move(best);
  return in;
}

std::string render_html(const ReportInput& in) {
  std::vector<const Program*> programs;  // best first, as the scorer answered
  for (const Program& p : in.best.programs) programs.push_back(&p);
  std::ostringstream h;
  h << "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Kiln campaign "
    << escape_html(in.best.campaign.campaign_id) << "</title><style>" << kStyle << "</style></head><body>\n";
  header(h, in, programs);
  progress(h, in, programs);
  map_section(h, programs);
  lineage(h, in, programs);
  candidates(h, programs);
  registry_section(h, in);
  h << "<script>" << kScript << "</script></body></html>\n";
  return h.str();
}

}  // namespace kiln::report
