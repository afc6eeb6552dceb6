// docs/seed-mapping.md names only code that exists: every function of its Kiln column, `name()` or
// `Class::name()`, is defined in the tree, and where the row says which file (`name()` in `file.cc`,
// or `name()` (`file.cc`)), that file has it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <regex>

#include "kiln/core/files.h"

namespace fs = std::filesystem;

namespace {

// Every C++ source under the folders that hold Kiln's code, by path relative to the source root.
std::map<std::string, std::string> sources() {
  std::map<std::string, std::string> out;
  for (const char* top : {"libs", "services", "tools", "proto-msgs", "clients"}) {
    const fs::path root = fs::path(KILN_SOURCE_DIR) / top;
    if (!fs::exists(root)) continue;
    for (const auto& f : fs::recursive_directory_iterator(root)) {
      const std::string ext = f.path().extension().string();
      if (!f.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".cu")) continue;
      auto text = kiln::read_file(f.path().string());
      if (text.is_ok()) out[fs::relative(f.path(), KILN_SOURCE_DIR).string()] = *text;
    }
  }
  return out;
}

bool has_word(const std::string& text, const std::string& word) {
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    auto is_id = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    bool before = at == 0 || !is_id(text[at - 1]);
    bool after = at + word.size() >= text.size() || !is_id(text[at + word.size()]);
    if (before && after) return true;
  }
  return false;
}

// Whether `qualified` ("Class::name", "ns::name" or "name") is defined in `text`.
bool defines(const std::string& text, const std::string& qualified) {
  size_t sep = qualified.rfind("::");
  const std::string name = sep == std::string::npos ? qualified : qualified.substr(sep + 2);
  if (!has_word(text, name)) return false;
  if (sep == std::string::npos) return true;
  const std::string scope = qualified.substr(0, sep);
  const std::string last = scope.substr(scope.rfind(':') == std::string::npos ? 0 : scope.rfind(':') + 1);
  return text.find(qualified) != std::string::npos || has_word(text, "class " + last) ||
         has_word(text, "struct " + last) || text.find("namespace " + last) != std::string::npos ||
         text.find("::" + last + " {") != std::string::npos;
}

// The table cells of the Kiln column (the second) of every table row.
std::vector<std::string> kiln_cells(const std::string& doc) {
  std::vector<std::string> cells;
  size_t start = 0;
  while (start < doc.size()) {
    size_t end = doc.find('\n', start);
    std::string line = doc.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? doc.size() : end + 1;
    if (!line.starts_with("| ")) continue;
    std::vector<std::string> cols;
    std::string cur;
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '|' && line[i - 1] != '\\') {
        cols.push_back(cur);
        cur.clear();
      } else {
        cur.push_back(line[i]);
      }
    }
    if (cols.size() >= 2) cells.push_back(cols[1]);
  }
  return cells;
}

}  // namespace

TEST_CASE("docs/seed-mapping.md names functions that exist, in the files it names", "[registry][docs]") {
  auto doc = kiln::read_file(std::string(KILN_SOURCE_DIR) + "/docs/seed-mapping.md");
  REQUIRE(doc.is_ok());
  const std::map<std::string, std::string> tree = sources();
  REQUIRE(tree.size() > 50);
  const std::regex call("`([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)\\([^`]*\\)`");
  const std::regex placed("`([A-Za-z_][A-Za-z0-9_:]*)\\([^`]*\\)`,? (?:in |\\()`([A-Za-z0-9_./]+\\.(?:cc|h))`");
  size_t checked = 0;
  for (const std::string& cell : kiln_cells(*doc)) {
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), call); it != std::sregex_iterator(); ++it) {
      const std::string name = (*it)[1];
      bool found = false;
      for (const auto& [path, text] : tree) found = found || defines(text, name);
      INFO(name + " in: " + cell);
      CHECK(found);
      ++checked;
    }
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), placed); it != std::sregex_iterator(); ++it) {
      const std::string name = (*it)[1], file = (*it)[2];
      bool file_seen = false, found = false;
      for (const auto& [path, text] : tree) {
        if (path != file && !path.ends_with("/" + file)) continue;
        file_seen = true;
        found = found || defines(text, name);
      }
      INFO(name + " in " + file + ": " + cell);
      CHECK(file_seen);
      CHECK(found);
    }
  }
  CHECK(checked > 40);
}
