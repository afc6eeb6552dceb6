// The archive of one campaign's scored programs and how parents are chosen from it. Behind an interface
// so MAP-Elites (cells on behaviour dimensions, islands) can replace the plain elite archive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/archive/features.h"
#include "kiln/core/random.h"
#include "kiln/proto/payloads.h"

namespace kiln::archive {

// What the next proposal starts from: a parent, programs from other cells for ideas, and the cell the
// proposer is asked to aim for.
struct Selection {
  std::optional<proto::Program> parent;
  std::vector<proto::Program> inspirations;
  std::string parent_cell;
  std::string target_cell;
  std::string mode;  // exploration | exploitation | random
};

class Archive {
 public:
  virtual ~Archive() = default;
  // Offers a scored program; true when it is kept. Offering the same id again replaces it.
  virtual bool add(const proto::Program& program) = 0;
  virtual std::optional<proto::Program> best() const = 0;
  // The kept programs, best first.
  virtual std::vector<proto::Program> elites() const = 0;
  // The program to start the next proposal from; nullopt while the archive is empty.
  virtual std::optional<proto::Program> select_parent(Rng& rng) const = 0;
  virtual size_t size() const = 0;
  // Parent, inspirations and target cell for a proposal of `island`. The default has no cells.
  virtual Selection select(Rng& rng, int64_t island) const {
    (void)island;
    Selection s;
    s.parent = select_parent(rng);
    s.mode = "exploitation";
    return s;
  }
  // Cells holding a program (the plain archive has one per program); "" when cells are not used.
  virtual size_t cells_filled() const { return size(); }
  virtual std::string cell_of(const proto::Program& program) const {
    (void)program;
    return {};
  }
  // Behaviour coordinates of a program (features.h coordinates()). The plain archive keeps no grid and
  // answers on the default dimensions.
  virtual std::vector<int64_t> coordinates_of(const proto::Program& program) const;
  // Program.diversity: behaviour_diversity (features.h) of `program` against the programs kept now,
  // itself aside.
  double diversity_of(const proto::Program& program) const;
};

struct EliteOptions {
  size_t capacity = 16;        // top-k kept
  double exploit_ratio = 0.7;  // chance of the best as parent; otherwise a uniformly random elite
};

// Keeps the top `capacity` programs by combined_score; ties go to the program offered first, so a
// rebuild from the database in scoring order gives the same archive.
class EliteArchive final : public Archive {
 public:
  explicit EliteArchive(EliteOptions options = {}) : options_(options) {}
  bool add(const proto::Program& program) override;
  std::optional<proto::Program> best() const override;
  std::vector<proto::Program> elites() const override;
  std::optional<proto::Program> select_parent(Rng& rng) const override;
  size_t size() const override { return entries_.size(); }

 private:
  struct Entry {
    proto::Program program;
    uint64_t order = 0;  // when it was first offered
  };
  EliteOptions options_;
  std::vector<Entry> entries_;  // sorted best first
  uint64_t next_order_ = 0;
};

struct MapElitesOptions {
  std::vector<std::string> dimensions = default_dimensions();
  int64_t islands = 4;
  int64_t migration_interval = 10;  // additions between ring migrations
  double exploration_ratio = 0.2;   // parent: a random cell of the island
  double exploitation_ratio = 0.7;  // parent: the island's best; the rest (0.1): a random cell of any island
  int64_t inspirations = 2;         // programs from other cells shown to the proposer
};

// MAP-Elites with islands (DESIGN §6, defaults after KernelFoundry). Each island is a grid of cells on
// `dimensions` (features.h); a cell keeps its best program (ties: the one there first). A program joins
// the island named by its metadata "island" (program 0 joins every island); every `migration_interval`
// additions each island's best is offered to the next island of the ring. Programs without code
// (perf_score 0) are not placed: they have nothing to start from. Everything is a function of the
// order of additions, so rebuilding from the database in scoring order gives the same archive.
class MapElitesArchive final : public Archive {
 public:
  explicit MapElitesArchive(MapElitesOptions options = {});
  bool add(const proto::Program& program) override;
  std::optional<proto::Program> best() const override;
  std::vector<proto::Program> elites() const override;
  std::optional<proto::Program> select_parent(Rng& rng) const override { return select(rng, 0).parent; }
  size_t size() const override;
  Selection select(Rng& rng, int64_t island) const override;
  size_t cells_filled() const override;
  std::string cell_of(const proto::Program& program) const override;

  std::vector<int64_t> coordinates_of(const proto::Program& program) const override;
  int64_t migrations() const { return migrations_; }
  // The cell keys of one island (tests).
  std::vector<std::string> island_cells(int64_t island) const;
  const proto::Program* at(int64_t island, const std::string& cell) const;

 private:
  using Grid = std::map<std::string, proto::Program>;
  bool place(Grid& grid, const std::string& key, const proto::Program& program);
  const proto::Program* island_best(const Grid& grid) const;
  void migrate();
  bool better(const proto::Program& a, const proto::Program& b) const;

  MapElitesOptions options_;
  std::vector<Grid> islands_;
  std::map<std::string, uint64_t> order_;  // program id -> when first offered (ties)
  // program id -> coordinates: the static analysis runs a few dozen regexes, and a program's code and
  // build never change once it is scored.
  mutable std::map<std::string, std::vector<int64_t>> coordinates_by_id_;
  uint64_t next_order_ = 0;
  int64_t additions_ = 0;
  int64_t migrations_ = 0;
};

}  // namespace kiln::archive
