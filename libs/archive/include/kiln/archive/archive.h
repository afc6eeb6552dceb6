// The archive of one campaign's scored programs and how parents are chosen from it. Behind an interface
// so MAP-Elites (cells on behaviour dimensions, islands) can replace the plain elite archive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "kiln/proto/payloads.h"

namespace kiln::archive {

// splitmix64: small, and the same sequence on every platform and standard library, which
// std::uniform_*_distribution does not promise. Parent choices must replay identically.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();               // [0, 1)
  uint64_t below(uint64_t bound);  // [0, bound); bound > 0

 private:
  uint64_t state_;
};

// A seed from text (the first 8 bytes of its sha256), e.g. "<campaign_id>#<proposal_index>".
uint64_t seed_from(std::string_view text);

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

}  // namespace kiln::archive
