#include "kiln/compiler/batch.h"

#include <algorithm>
#include <cmath>
#include <cctype>

namespace kiln::compiler {
namespace {

constexpr std::string_view kAbiInclude = "\"kiln/kernel_abi.h\"";

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool is_identifier(std::string_view s) {
  return !s.empty() && ident_start(s.front()) && std::all_of(s.begin(), s.end(), ident_char);
}

std::string_view skip_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

std::string_view identifier_at(std::string_view s) {
  size_t n = 0;
  if (s.empty() || !ident_start(s.front())) return {};
  while (n < s.size() && ident_char(s[n])) ++n;
  return s.substr(0, n);
}

// Each directive of the text (already through preprocessor_text): its name and what follows it.
template <typename Visit>
void for_each_directive(std::string_view text, Visit visit) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string_view line = text.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    pos = eol == std::string_view::npos ? text.size() : eol + 1;
    line = skip_blanks(line);
    if (line.empty() || line.front() != '#') continue;
    line = skip_blanks(line.substr(1));
    std::string_view name = identifier_at(line);
    visit(name, skip_blanks(line.substr(name.size())));
  }
}

// The identifiers of the text outside string and character literals, with where each starts.
template <typename Visit>
void for_each_identifier(std::string_view text, Visit visit) {
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"' || c == '\'') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != c && text[j] != '\n') j += text[j] == '\\' ? 2 : 1;
      i = j + 1;
    } else if (ident_start(c) && (i == 0 || !ident_char(text[i - 1]))) {
      std::string_view id = identifier_at(text.substr(i));
      visit(id, i);
      i += id.size();
    } else {
      ++i;
    }
  }
}

}  // namespace

std::string preprocessor_text(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  size_t i = 0;
  auto at = [&](size_t k) { return k < source.size() ? source[k] : '\0'; };
  // The length of a line splice at k: a backslash, blanks or a carriage return after it (gcc and nvcc's
  // front end accept those), then a newline; 0 where there is none.
  auto splice = [&](size_t k) -> size_t {
    if (at(k) != '\\') return 0;
    size_t j = k + 1;
    while (at(j) == ' ' || at(j) == '\t' || at(j) == '\r') ++j;
    return at(j) == '\n' ? j + 1 - k : 0;
  };
  while (i < source.size()) {
    const char c = source[i];
    if (const size_t n = splice(i)) {
      i += n;
    } else if (c == '/' && at(i + 1) == '/') {
      while (i < source.size() && source[i] != '\n') {
        // A line comment ends at a newline that no splice continues.
        if (const size_t joined = splice(i)) i += joined - 1;
        ++i;
      }
      out += ' ';
    } else if (c == '/' && at(i + 1) == '*') {
      size_t end = source.find("*/", i + 2);
      end = end == std::string_view::npos ? source.size() : end + 2;
      // One blank, newlines and all: a directive after the comment is on the line the comment began.
      out += ' ';
      i = end;
    } else if (c == 'R' && at(i + 1) == '"' &&
               (i == 0 || !ident_char(source[i - 1]) || source[i - 1] == '8' || source[i - 1] == 'u' ||
                source[i - 1] == 'U' || source[i - 1] == 'L')) {
      // A raw string literal, R"delim( ... )delim", kept whole: nothing in it is a comment or a quote.
      const size_t open = source.find('(', i + 2);
      const std::string close =
          open == std::string_view::npos ? std::string() : ")" + std::string(source.substr(i + 2, open - i - 2)) + "\"";
      size_t end = open == std::string_view::npos ? std::string_view::npos : source.find(close, open + 1);
      end = end == std::string_view::npos ? source.size() : end + close.size();
      out.append(source.substr(i, end - i));
      i = end;
    } else if (c == '"' || c == '\'') {
      out += c;
      ++i;
      while (i < source.size() && source[i] != c && source[i] != '\n') {
        if (source[i] == '\\' && i + 1 < source.size()) out += source[i++];
        out += source[i++];
      }
      if (i < source.size() && source[i] == c) out += source[i++];
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

SourceDirectives preprocessed_directives(std::string_view text) {
  SourceDirectives d;
  for_each_directive(text, [&](std::string_view name, std::string_view rest) {
    if (name == "include") {
      size_t end = std::string_view::npos;
      if (!rest.empty() && rest.front() == '<') end = rest.find('>');
      if (!rest.empty() && rest.front() == '"') end = rest.find('"', 1);
      d.includes.emplace_back(end == std::string_view::npos ? rest : rest.substr(0, end + 1));
    } else if (name == "define" || name == "undef") {
      std::string_view macro = identifier_at(rest);
      if (!macro.empty() && std::find(d.defined.begin(), d.defined.end(), macro) == d.defined.end())
        d.defined.emplace_back(macro);
    }
  });
  return d;
}

SourceDirectives source_directives(std::string_view source) {
  return preprocessed_directives(preprocessor_text(source));
}

Status batchable(std::string_view source, const std::vector<std::string>& param_names) {
  auto no = [](const std::string& why) { return failed_precondition("not batched: " + why); };
  for (const auto& p : param_names) {
    // Headers are included before a variant's defines; a macro a header reads must not be a parameter.
    if (!is_identifier(p) || p.front() == '_' || p == "NDEBUG" || p == "kiln_entry")
      return no("parameter '" + p + "' could change what a header means");
  }
  const std::string text = preprocessor_text(source);
  const SourceDirectives d = preprocessed_directives(text);
  for (const auto& inc : d.includes) {
    if (inc.empty() || (inc.front() != '<' && inc != kAbiInclude))
      return no("it includes a file of its own (" + inc + ")");
  }
  Status refused = Status::ok();
  for_each_directive(text, [&](std::string_view name, std::string_view rest) {
    if (!refused.is_ok()) return;
    if (name == "pragma" && identifier_at(rest) == "once") refused = no("#pragma once");
    if (name == "include_next" || name == "import") refused = no("#" + std::string(name));
    if (name == "undef" && identifier_at(rest) == "kiln_entry") refused = no("it undefines kiln_entry");
  });
  KILN_RETURN_IF_ERROR(refused);
  // C linkage ignores namespaces: only kiln_entry (renamed per variant) may have it.
  for_each_identifier(text, [&](std::string_view id, size_t at) {
    if (!refused.is_ok()) return;
    if (id == "__BASE_FILE__" || id == "__INCLUDE_LEVEL__" || id == "__COUNTER__") {
      refused = no("it reads " + std::string(id));
    } else if (id == "extern") {
      std::string_view after = text;
      after.remove_prefix(at + id.size());
      after = after.substr(0, after.find_first_of("(;{="));
      if (after.find("\"C") != std::string_view::npos && after.find("kiln_entry") == std::string_view::npos)
        refused = no("it declares C-linkage names besides kiln_entry");
    }
  });
  return refused;
}

std::string variant_entry(size_t index) { return "kiln_entry_v" + std::to_string(index); }
std::string variant_namespace(size_t index) { return "kiln_variant_" + std::to_string(index); }

std::string batch_unit(std::string_view source_name, std::string_view source, const std::vector<Defines>& variants) {
  const SourceDirectives d = source_directives(source);
  std::string u = "// " + std::to_string(variants.size()) + " variants of " + std::string(source_name) +
                  " in one translation unit (kiln-compiler).\n";
  // The headers first, at global scope, in the source's order: inside the namespaces their guards skip them.
  if (std::find(d.includes.begin(), d.includes.end(), kAbiInclude) == d.includes.end())
    u += "#include " + std::string(kAbiInclude) + "\n";
  for (const auto& inc : d.includes) u += "#include " + inc + "\n";
  // Every macro a variant sets (its parameters, kiln_entry, what the source defines or undefines) is saved
  // before it and restored after it, so each variant starts from what the headers left, as if alone.
  std::vector<std::string> touched{"kiln_entry"};
  for (const auto& v : variants)
    for (const auto& [name, value] : v) touched.push_back(name);
  touched.insert(touched.end(), d.defined.begin(), d.defined.end());
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (size_t i = 0; i < variants.size(); ++i) {
    u += "\n";
    for (const auto& name : touched) u += "#pragma push_macro(\"" + name + "\")\n";
    u += "#undef kiln_entry\n#define kiln_entry " + variant_entry(i) + "\n";
    for (const auto& [name, value] : variants[i]) u += "#undef " + name + "\n#define " + name + " " + value + "\n";
    u += "namespace " + variant_namespace(i) + " {\n#include \"" + std::string(source_name) + "\"\n}\n";
    for (auto it = touched.rbegin(); it != touched.rend(); ++it) u += "#pragma pop_macro(\"" + *it + "\")\n";
  }
  return u;
}

std::string variant_stub(size_t index) {
  const std::string entry = variant_entry(index);
  return "// Variant " + std::to_string(index) + "'s entry point (kiln-compiler).\n" + "extern int " + entry +
         "(const void* args);\n" +
         "__attribute__((visibility(\"default\"))) int kiln_entry(const void* args) { return " + entry + "(args); }\n";
}

std::vector<std::string> ptxas_log_by_variant(std::string_view log, size_t variants) {
  std::vector<std::string> out(variants);
  std::vector<std::string> tags;  // the namespace as the Itanium ABI mangles it: its length, then its name
  for (size_t i = 0; i < variants; ++i) {
    const std::string ns = variant_namespace(i);
    tags.push_back(std::to_string(ns.size()) + ns);
  }
  // -1: lines of no function (sent to all); otherwise the variant whose function the lines describe.
  long owner = -1;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t eol = log.find('\n', pos);
    const size_t next = eol == std::string_view::npos ? log.size() : eol + 1;
    std::string_view line = log.substr(pos, next - pos);
    pos = next;
    if (line.find("Compiling entry function '") != std::string_view::npos ||
        line.find("Function properties for ") != std::string_view::npos) {
      owner = -2;  // a function of no variant (none of the source's are outside the namespaces)
      for (size_t i = 0; i < variants; ++i)
        if (line.find(tags[i]) != std::string_view::npos) owner = static_cast<long>(i);
    } else if (line.find("bytes gmem") != std::string_view::npos) {  // the module's, no function's
      owner = -1;
    }
    if (owner == -1) {
      for (auto& v : out) v += line;
    } else if (owner >= 0) {
      out[static_cast<size_t>(owner)] += line;
    }
  }
  for (auto& v : out)
    if (!v.empty() && v.back() != '\n') v += '\n';
  return out;
}

double batch_share(int in_flight, int cores, double cores_per_build, int64_t batch_max) {
  if (in_flight < 2 || batch_max < 2) return 1;
  const double demand = static_cast<double>(in_flight) * std::max(cores_per_build, 0.0);
  const double room = kBatchBusyTarget * static_cast<double>(std::max(cores, 1));
  return std::clamp(demand / room, 1.0, static_cast<double>(batch_max));
}

size_t BatchSizer::whole(double share) { return static_cast<size_t>(std::floor(std::max(share, 1.0) + 1e-9)); }

size_t BatchSizer::next(double share) {
  share = std::max(share, 1.0);
  const size_t size = whole(share);
  carried_ += share - static_cast<double>(size);
  if (carried_ >= 1 - 1e-9) {
    carried_ -= 1;
    return size + 1;
  }
  return size;
}

}  // namespace kiln::compiler
