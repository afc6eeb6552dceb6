#include "kiln/broker/allowlist.h"

#include <sys/stat.h>

#include <cerrno>
#include <sstream>

#include "kiln/core/files.h"
#include "kiln/messaging/curve.h"

namespace kiln::broker {

namespace {
constexpr size_t kMaxAllowlistBytes = 1u << 20;
}  // namespace

Result<Allowlist> Allowlist::parse(const std::string& text, const std::string& source) {
  Allowlist list;
  std::istringstream in(text);
  std::string line;
  std::map<std::string, int> name_lines;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string where = source + ":" + std::to_string(number);
    // '#' is a Z85 character, so a comment is a word that starts with it where a name or a note may be,
    // never a '#' inside (or at the start of) the key.
    std::istringstream words(line);
    std::string name, key, extra;
    if (!(words >> name) || name[0] == '#') continue;  // blank or comment
    if (!(words >> key))
      return invalid_argument(where + ": expected \"<name> <z85 public key>\", got only \"" + name + "\"");
    if ((words >> extra) && extra[0] != '#')
      return invalid_argument(where + ": unexpected text after the key: \"" + extra + "\"");
    if (!messaging::is_valid_bridge_name(name))
      return invalid_argument(where + ": bridge name \"" + name + "\" must be 1-64 characters of [A-Za-z0-9_.-]");
    auto raw = messaging::decode_curve_key(key);
    if (!raw.is_ok()) return raw.status().with_context(where + ": bridge '" + name + "'");
    if (auto seen = name_lines.find(name); seen != name_lines.end())
      return invalid_argument(where + ": bridge '" + name + "' is already listed on line " +
                              std::to_string(seen->second));
    if (list.names_.count(*raw))
      return invalid_argument(where + ": bridge '" + name + "': the same key is already listed for '" +
                              list.names_[*raw] + "'");
    name_lines[name] = number;
    list.names_[*raw] = name;
  }
  return list;
}

Result<Allowlist> Allowlist::load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return Allowlist{};
  auto text = read_file(path, kMaxAllowlistBytes);
  if (!text.is_ok()) return text.status();
  return parse(*text, path);
}

std::string Allowlist::name_of(const std::string& raw_public_key) const {
  auto it = names_.find(raw_public_key);
  return it == names_.end() ? std::string() : it->second;
}

bool Allowlist::has_name(const std::string& name) const {
  for (const auto& [key, n] : names_)
    if (n == name) return true;
  return false;
}

}  // namespace kiln::broker
