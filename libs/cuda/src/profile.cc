#include "kiln/cuda/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kiln/core/strings.h"

namespace kiln::cuda {
namespace {

// ncu's names for what a profile holds.
constexpr const char* kDuration = "gpu__time_duration.sum";  // ns
constexpr const char* kOccupancy = "sm__warps_active.avg.pct_of_peak_sustained_active";
constexpr const char* kDram = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kSm = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kL1Hit = "l1tex__t_sector_hit_rate.pct";
constexpr const char* kL2Hit = "lts__t_sector_hit_rate.pct";
constexpr const char* kRegisters = "launch__registers_per_thread";
constexpr const char* kSharedStatic = "launch__shared_mem_per_block_static";
constexpr const char* kSharedDynamic = "launch__shared_mem_per_block_dynamic";

std::vector<std::string> split_csv_line(std::string_view line) {
  std::vector<std::string> out;
  std::string cell;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cell.push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cell.push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(cell));
      cell.clear();
    } else if (c != '\r') {
      cell.push_back(c);
    }
  }
  out.push_back(std::move(cell));
  return out;
}

// "3,520" -> 3520; empty or "n/a" -> -1.
double number(const std::string& cell) {
  std::string digits;
  for (char c : cell)
    if (c != ',') digits.push_back(c);
  if (digits.empty()) return -1;
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  return end && *end == '\0' ? v : -1;
}

}  // namespace

std::vector<std::string> ncu_argv(const std::string& ncu, const std::string& csv_path, int max_kernels,
                                  const std::vector<std::string>& eval_argv) {
  std::string metrics;
  for (const char* m : {kDuration, kOccupancy, kDram, kSm, kL1Hit, kL2Hit, kRegisters, kSharedStatic, kSharedDynamic})
    metrics += (metrics.empty() ? "" : ",") + std::string(m);
  std::vector<std::string> argv = {ncu,
                                   "--target-processes",
                                   "all",
                                   "--csv",
                                   "--page",
                                   "raw",
                                   "--metrics",
                                   metrics,
                                   "--launch-count",
                                   std::to_string(std::max(max_kernels, 1)),
                                   "--log-file",
                                   csv_path};
  argv.insert(argv.end(), eval_argv.begin(), eval_argv.end());
  return argv;
}

Result<Profile> parse_ncu_csv(std::string_view csv, int64_t pid) {
  std::vector<std::string> header;
  std::map<std::string, size_t> column;
  struct Row {
    double duration_ns, occupancy, dram, sm, l1, l2, registers, shared;
    std::string name;
  };
  std::vector<Row> rows;
  size_t at = 0;
  while (at < csv.size()) {
    size_t end = csv.find('\n', at);
    if (end == std::string_view::npos) end = csv.size();
    const std::string_view line = csv.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line.rfind("==", 0) == 0) continue;  // ncu's own messages
    std::vector<std::string> cells = split_csv_line(line);
    if (header.empty()) {
      header = cells;
      for (size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
      if (!column.count("Process ID") || !column.count(kDuration))
        return invalid_argument("ncu csv: no \"Process ID\" or duration column in the header");
      continue;
    }
    auto cell = [&](const char* name) -> std::string {
      auto it = column.find(name);
      return it == column.end() || it->second >= cells.size() ? std::string() : cells[it->second];
    };
    if (cell("ID").empty()) continue;  // the units row
    if (pid > 0 && number(cell("Process ID")) != static_cast<double>(pid)) continue;
    const double shared_static = number(cell(kSharedStatic)), shared_dynamic = number(cell(kSharedDynamic));
    rows.push_back({number(cell(kDuration)), number(cell(kOccupancy)), number(cell(kDram)), number(cell(kSm)),
                    number(cell(kL1Hit)), number(cell(kL2Hit)), number(cell(kRegisters)),
                    std::max(shared_static, 0.0) + std::max(shared_dynamic, 0.0), cell("Kernel Name")});
  }
  if (rows.empty()) return not_found("ncu csv: no kernel of process " + std::to_string(pid));

  double total_ns = 0;
  for (const Row& r : rows) total_ns += std::max(r.duration_ns, 0.0);
  // Duration-weighted means of a percentage (equal weights when no duration was read), clamped to 0..100.
  auto weighted = [&](double Row::*field) {
    double sum = 0, weight = 0;
    for (const Row& r : rows) {
      if (r.*field < 0) continue;
      const double w = total_ns > 0 ? std::max(r.duration_ns, 0.0) : 1.0;
      sum += w * std::clamp(r.*field, 0.0, 100.0);
      weight += w;
    }
    return weight > 0 ? sum / weight : -1.0;
  };
  Profile p;
  auto& m = p.metrics;
  m["kernels"] = static_cast<double>(rows.size());
  m["duration_us"] = total_ns / 1e3;
  m["occupancy_pct"] = weighted(&Row::occupancy);
  m["dram_pct"] = weighted(&Row::dram);
  m["sm_pct"] = weighted(&Row::sm);
  m["l1_hit_pct"] = weighted(&Row::l1);
  m["l2_hit_pct"] = weighted(&Row::l2);
  double registers = -1, shared = 0;
  const Row* longest = &rows.front();
  for (const Row& r : rows) {
    registers = std::max(registers, r.registers);
    shared = std::max(shared, r.shared);
    if (r.duration_ns > longest->duration_ns) longest = &r;
  }
  m["registers_per_thread"] = registers;
  m["shared_bytes_per_block"] = shared;
  const double dram = m["dram_pct"], sm = m["sm_pct"];
  const bool bound = std::max(dram, sm) >= kBoundPct;
  m["limiter"] = !bound ? 0 : dram >= sm ? 1 : 2;
  const char* limiter = !bound       ? "latency bound (neither DRAM nor SM throughput reaches 60 % of peak)"
                        : dram >= sm ? "memory bound"
                                     : "compute bound";
  std::erase_if(m, [](const auto& kv) { return kv.second < 0; });
  auto pct = [&](const char* key, const char* label) {
    auto it = m.find(key);
    return it == m.end() ? std::string() : std::string(label) + " " + format_value("%.0f", it->second) + " %";
  };
  // "dram 81 %, sm 12 % of peak; occupancy 48 %; L1 hit 0 %, L2 hit 62 %; 40 registers/thread, ..."
  auto group = [](std::initializer_list<std::string> items, const std::string& tail = "") {
    std::string out;
    for (const std::string& item : items)
      if (!item.empty()) out += (out.empty() ? "" : ", ") + item;
    return out.empty() ? out : out + tail;
  };
  std::string parts;
  for (const std::string& g :
       {group({pct("dram_pct", "dram"), pct("sm_pct", "sm")}, " of peak"), group({pct("occupancy_pct", "occupancy")}),
        group({pct("l1_hit_pct", "L1 hit"), pct("l2_hit_pct", "L2 hit")}),
        group({registers >= 0 ? format_value("%.0f", registers) + " registers/thread" : std::string(),
               format_value("%.0f", shared) + " B shared/block"})})
    if (!g.empty()) parts += (parts.empty() ? "" : "; ") + g;
  const std::string kernels = rows.size() == 1 ? "1 kernel" : std::to_string(rows.size()) + " kernels";
  p.summary = kernels + ", " + format_value("%.1f", total_ns / 1e3) + " us: " + parts + ": " + limiter;
  if (rows.size() > 1) p.summary += "; longest: " + longest->name.substr(0, 80);
  return p;
}

std::string ncu_errors(std::string_view output) {
  constexpr std::string_view kPrefix = "==ERROR==";
  std::string out;
  int found = 0;
  size_t at = 0;
  while (found < 3 && (at = output.find(kPrefix, at)) != std::string_view::npos) {
    at += kPrefix.size();
    size_t end = output.find('\n', at);
    if (end == std::string_view::npos) end = output.size();
    std::string_view line = output.substr(at, end - at);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    if (!line.empty()) {
      out += (out.empty() ? "" : "; ") + std::string(line);
      ++found;
    }
    at = end;
  }
  if (out.size() > 400) out = out.substr(0, 397) + "...";
  return out;
}

bool ncu_failure_is_transient(std::string_view output) {
  for (std::string_view permanent : {"ERR_NVGPUCTRPERM", "No such file or directory", "Failed to launch",
                                     "No kernels were profiled", "not supported"})
    if (output.find(permanent) != std::string_view::npos) return false;
  return true;
}

}  // namespace kiln::cuda
