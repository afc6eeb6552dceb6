#include <algorithm>
#include <charconv>
#include <set>

#include "kiln/archive/archive.h"

namespace kiln::archive {

namespace {

int64_t island_of(const proto::Program& p, int64_t islands) {
  auto it = p.metadata.find("island");
  if (it == p.metadata.end()) return 0;
  int64_t i = 0;
  const std::string& text = it->second;
  // Unparseable (a hand-edited record): island 0 rather than a lost program.
  if (std::from_chars(text.data(), text.data() + text.size(), i).ec != std::errc()) i = 0;
  return ((i % islands) + islands) % islands;
}

int64_t hardware_value(const proto::Program& p, const char* key) {
  auto it = p.eval.profiler_data.find(key);
  return it == p.eval.profiler_data.end() ? -1 : static_cast<int64_t>(it->second);
}

bool is_static_dimension(const std::string& d) {
  return d == dim::kMemory || d == dim::kCompute || d == dim::kParallelism;
}

}  // namespace

std::vector<int64_t> Archive::coordinates_of(const proto::Program& p) const {
  return coordinates(default_dimensions(), p.code, hardware_value(p, "registers"), hardware_value(p, "shared_bytes"));
}

double Archive::diversity_of(const proto::Program& program) const {
  std::vector<std::vector<int64_t>> others;
  for (const proto::Program& p : elites())
    if (p.id != program.id) others.push_back(coordinates_of(p));
  return behaviour_diversity(coordinates_of(program), others);
}

MapElitesArchive::MapElitesArchive(MapElitesOptions options) : options_(std::move(options)) {
  if (options_.islands < 1) options_.islands = 1;
  if (options_.dimensions.empty()) options_.dimensions = default_dimensions();
  islands_.resize(static_cast<size_t>(options_.islands));
}

std::vector<int64_t> MapElitesArchive::coordinates_of(const proto::Program& p) const {
  auto analyse = [&] {
    return coordinates(options_.dimensions, p.code, hardware_value(p, "registers"), hardware_value(p, "shared_bytes"));
  };
  // Only scored programs are cached: program 0's build figures arrive with its score.
  if (p.id.empty() || p.eval.perf_score < 0) return analyse();
  auto it = coordinates_by_id_.find(p.id);
  if (it == coordinates_by_id_.end()) it = coordinates_by_id_.emplace(p.id, analyse()).first;
  return it->second;
}

std::string MapElitesArchive::cell_of(const proto::Program& p) const {
  return cell_key(options_.dimensions, coordinates_of(p));
}

bool MapElitesArchive::better(const proto::Program& a, const proto::Program& b) const {
  if (a.eval.combined_score != b.eval.combined_score) return a.eval.combined_score > b.eval.combined_score;
  auto oa = order_.find(a.id), ob = order_.find(b.id);
  uint64_t x = oa == order_.end() ? UINT64_MAX : oa->second, y = ob == order_.end() ? UINT64_MAX : ob->second;
  return x < y;
}

bool MapElitesArchive::place(Grid& grid, const std::string& key, const proto::Program& program) {
  auto [it, inserted] = grid.try_emplace(key, program);
  if (inserted) return true;
  if (it->second.id == program.id || better(program, it->second)) {
    it->second = program;
    return true;
  }
  return false;
}

bool MapElitesArchive::add(const proto::Program& program) {
  if (program.eval.perf_score <= 0 && !program.is_program0) return false;
  order_.try_emplace(program.id, next_order_++);
  const std::string key = cell_of(program);
  bool kept = false;
  if (program.is_program0) {
    for (Grid& grid : islands_) kept = place(grid, key, program) || kept;
  } else {
    kept = place(islands_[static_cast<size_t>(island_of(program, options_.islands))], key, program);
  }
  ++additions_;
  if (options_.migration_interval > 0 && islands_.size() > 1 && additions_ % options_.migration_interval == 0)
    migrate();
  return kept;
}

const proto::Program* MapElitesArchive::island_best(const Grid& grid) const {
  const proto::Program* best = nullptr;
  for (const auto& [key, p] : grid)
    if (!best || better(p, *best)) best = &p;
  return best;
}

void MapElitesArchive::migrate() {
  // Snapshot first: a program moves one step per migration, not around the whole ring.
  std::vector<std::optional<proto::Program>> emigrants;
  for (const Grid& grid : islands_) {
    const proto::Program* b = island_best(grid);
    emigrants.push_back(b ? std::optional<proto::Program>(*b) : std::nullopt);
  }
  for (size_t i = 0; i < islands_.size(); ++i) {
    if (!emigrants[i]) continue;
    place(islands_[(i + 1) % islands_.size()], cell_of(*emigrants[i]), *emigrants[i]);
  }
  ++migrations_;
}

std::optional<proto::Program> MapElitesArchive::best() const {
  const proto::Program* best = nullptr;
  for (const Grid& grid : islands_)
    if (const proto::Program* b = island_best(grid); b && (!best || better(*b, *best))) best = b;
  if (!best) return std::nullopt;
  return *best;
}

std::vector<proto::Program> MapElitesArchive::elites() const {
  std::map<std::string, const proto::Program*> unique;
  for (const Grid& grid : islands_)
    for (const auto& [key, p] : grid) unique.emplace(p.id, &p);
  std::vector<proto::Program> out;
  for (const auto& [id, p] : unique) out.push_back(*p);
  std::sort(out.begin(), out.end(), [this](const proto::Program& a, const proto::Program& b) { return better(a, b); });
  return out;
}

size_t MapElitesArchive::size() const {
  std::set<std::string> ids;
  for (const Grid& grid : islands_)
    for (const auto& [key, p] : grid) ids.insert(p.id);
  return ids.size();
}

size_t MapElitesArchive::cells_filled() const {
  std::set<std::string> keys;
  for (const Grid& grid : islands_)
    for (const auto& [key, p] : grid) keys.insert(key);
  return keys.size();
}

std::vector<std::string> MapElitesArchive::island_cells(int64_t island) const {
  std::vector<std::string> out;
  for (const auto& [key, p] : islands_.at(static_cast<size_t>(island))) out.push_back(key);
  return out;
}

const proto::Program* MapElitesArchive::at(int64_t island, const std::string& cell) const {
  const Grid& grid = islands_.at(static_cast<size_t>(island));
  auto it = grid.find(cell);
  return it == grid.end() ? nullptr : &it->second;
}

Selection MapElitesArchive::select(Rng& rng, int64_t island) const {
  Selection s;
  const size_t n = islands_.size();
  const Grid& home = islands_[static_cast<size_t>(((island % static_cast<int64_t>(n)) + static_cast<int64_t>(n)) %
                                                  static_cast<int64_t>(n))];
  std::vector<const proto::Program*> everywhere;
  std::vector<std::string> everywhere_keys;
  for (const Grid& grid : islands_)
    for (const auto& [key, p] : grid) {
      everywhere.push_back(&p);
      everywhere_keys.push_back(key);
    }
  if (everywhere.empty()) return s;

  // The three draws happen every time, so the stream used per selection does not depend on the mode.
  const double u = rng.uniform();
  const uint64_t home_pick = rng.below(std::max<uint64_t>(home.size(), 1));
  const uint64_t any_pick = rng.below(everywhere.size());
  const proto::Program* parent = nullptr;
  std::string parent_key;
  if (home.empty() || u >= options_.exploration_ratio + options_.exploitation_ratio) {
    parent = everywhere[any_pick];
    parent_key = everywhere_keys[any_pick];
    s.mode = "random";
  } else if (u < options_.exploration_ratio) {
    auto it = std::next(home.begin(), static_cast<std::ptrdiff_t>(home_pick));
    parent = &it->second;
    parent_key = it->first;
    s.mode = "exploration";
  } else {
    parent = island_best(home);
    parent_key = cell_of(*parent);
    s.mode = "exploitation";
  }
  s.parent = *parent;
  s.parent_cell = parent_key;

  // Inspirations: distinct programs from other cells, the home island's first.
  std::vector<const proto::Program*> pool;
  std::set<std::string> seen{parent->id};
  auto offer = [&](const std::string& key, const proto::Program& p) {
    if (key != parent_key && seen.insert(p.id).second) pool.push_back(&p);
  };
  for (const auto& [key, p] : home) offer(key, p);
  const size_t home_pool = pool.size();
  for (const Grid& grid : islands_)
    for (const auto& [key, p] : grid) offer(key, p);
  const size_t want = static_cast<size_t>(std::max<int64_t>(options_.inspirations, 0));
  // Partial shuffle of the home part, then of the rest, so home-island programs come first.
  for (size_t i = 0; i < pool.size() && s.inspirations.size() < want; ++i) {
    const size_t end = i < home_pool ? home_pool : pool.size();
    std::swap(pool[i], pool[i + rng.below(end - i)]);
    s.inspirations.push_back(*pool[i]);
  }

  // Target: an empty neighbouring cell of the home island, one static level up or down.
  // The parent's coordinates, read back from its cell key rather than by analysing its code again.
  std::vector<int64_t> at;
  for (size_t start = 0; start < parent_key.size();) {
    size_t comma = parent_key.find(',', start);
    if (comma == std::string::npos) comma = parent_key.size();
    size_t eq = parent_key.find('=', start);
    int64_t level = 0;
    if (eq != std::string::npos && eq < comma)
      std::from_chars(parent_key.data() + eq + 1, parent_key.data() + comma, level);
    at.push_back(level);
    start = comma + 1;
  }
  at.resize(options_.dimensions.size(), 0);
  std::vector<std::string> empty_neighbours;
  for (size_t d = 0; d < options_.dimensions.size(); ++d) {
    if (!is_static_dimension(options_.dimensions[d])) continue;
    for (int64_t step : {1, -1}) {
      std::vector<int64_t> c = at;
      c[d] += step;
      if (c[d] < 0 || c[d] >= kLevels) continue;
      std::string key = cell_key(options_.dimensions, c);
      if (!home.count(key)) empty_neighbours.push_back(key);
    }
  }
  s.target_cell = empty_neighbours.empty() ? parent_key : empty_neighbours[rng.below(empty_neighbours.size())];
  return s;
}

}  // namespace kiln::archive
