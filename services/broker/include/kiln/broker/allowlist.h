// The external bridges' allowlist (DESIGN §2): which CURVE client keys the broker's ZAP handler admits,
// and the name each one carries into logs and metrics. The file holds one "<name> <z85 public key>" per
// line; a line starting with '#' is a comment, and so is a '#' word after the key; blank lines are ignored. `kiln keys
// new NAME` prints the line to add.
#pragma once

#include <map>
#include <string>

#include "kiln/core/status.h"

namespace kiln::broker {

class Allowlist {
 public:
  // Parses the text of an allowlist file; errors name `source`, the line and what is wrong.
  static Result<Allowlist> parse(const std::string& text, const std::string& source);
  // Reads and parses a file; a file that does not exist is an empty list (nothing is admitted).
  static Result<Allowlist> load(const std::string& path);

  // The bridge name for a raw 32-byte public key, or empty when the key is not listed.
  std::string name_of(const std::string& raw_public_key) const;
  bool has_name(const std::string& name) const;
  size_t size() const { return names_.size(); }

 private:
  std::map<std::string, std::string> names_;  // raw public key -> bridge name
};

}  // namespace kiln::broker
