#include "kiln/compiler/nvcc_graph.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "kiln/core/strings.h"

namespace kiln::compiler {
namespace {

constexpr std::string_view kDryRunPrefix = "#$ ";
constexpr std::string_view kFatbinSymbol = "kiln_fatbin_data";

// The words of a command as the shell would pass them (double quotes and their backslash escapes undone;
// nvcc's dry run uses no other quoting). Only for reading the command: it runs as printed.
std::vector<std::string> words(std::string_view cmd) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  bool quoted = false;
  for (size_t i = 0; i < cmd.size(); ++i) {
    const char c = cmd[i];
    if (quoted) {
      if (c == '"') {
        quoted = false;
      } else if (c == '\\' && i + 1 < cmd.size()) {
        word += cmd[++i];
      } else {
        word += c;
      }
    } else if (c == '"') {
      quoted = in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) out.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(std::move(word));
  return out;
}

std::string basename_of(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool has_word(const std::vector<std::string>& w, std::string_view word) {
  for (const auto& x : w) {
    if (x == word) return true;
  }
  return false;
}

// The value of `flag` given as "FLAG VALUE" or "FLAG=VALUE".
std::optional<std::string> value_of(const std::vector<std::string>& w, std::string_view flag) {
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == flag && i + 1 < w.size()) return w[i + 1];
    if (w[i].size() > flag.size() && w[i].starts_with(flag) && w[i][flag.size()] == '=') {
      return w[i].substr(flag.size() + 1);
    }
  }
  return std::nullopt;
}

// `cmd` without the word that starts with `prefix` (up to the next unquoted blank); nullopt when absent.
std::optional<std::string> without_word(std::string_view cmd, std::string_view prefix) {
  for (size_t at = cmd.find(prefix); at != std::string_view::npos; at = cmd.find(prefix, at + 1)) {
    if (at > 0 && !std::isspace(static_cast<unsigned char>(cmd[at - 1]))) continue;
    size_t end = at;
    bool quoted = false;
    while (end < cmd.size() && (quoted || !std::isspace(static_cast<unsigned char>(cmd[end])))) {
      if (cmd[end] == '\\' && quoted)
        ++end;
      else if (cmd[end] == '"')
        quoted = !quoted;
      ++end;
    }
    std::string out(cmd.substr(0, at));
    out += cmd.substr(end);
    return out;
  }
  return std::nullopt;
}

size_t count_of(std::string_view s, std::string_view what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string_view::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

bool plain_value(std::string_view v) {
  for (char c : v) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '"' || c == '\'' || c == '\\' || c == '$' || c == '`')
      return false;
  }
  return true;
}

Status set_once(std::string& slot, std::string_view cmd, std::string_view step) {
  if (!slot.empty()) return failed_precondition("nvcc dry run: more than one " + std::string(step) + " step");
  slot = std::string(cmd);
  return Status::ok();
}

}  // namespace

const std::vector<std::string>& nvcc_graph_steps() {
  static const std::vector<std::string> kSteps{"host-preprocess", "cudafe++",      "device-preprocess", "cicc", "ptxas",
                                               "fatbinary",       "fatbin-object", "host-compile",      "link"};
  return kSteps;
}

Result<NvccPlan> parse_nvcc_dryrun(std::string_view text, const std::string& keep_dir) {
  NvccPlan plan;
  plan.keep_dir = keep_dir;
  std::string dlink_object;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string_view line = text.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    pos = eol == std::string_view::npos ? text.size() : eol + 1;
    if (!line.starts_with(kDryRunPrefix)) continue;
    line.remove_prefix(kDryRunPrefix.size());
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
    if (line.empty()) continue;

    // "NAME=value": a variable nvcc sets. Those its tools read have plain values; the others ("INCLUDES",
    // "_SPACE_") are nvcc's own and already expanded into the commands.
    size_t eq = line.find('=');
    if (eq != std::string_view::npos && eq > 0) {
      std::string_view name = line.substr(0, eq);
      bool is_name = !std::isdigit(static_cast<unsigned char>(name[0]));
      for (char c : name) is_name = is_name && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      if (is_name) {
        std::string_view value = line.substr(eq + 1);
        if (plain_value(value)) plan.env.emplace_back(std::string(name), std::string(value));
        continue;
      }
    }

    const std::vector<std::string> w = words(line);
    const std::string tool = basename_of(w.front());
    const std::string output = value_of(w, "-o").value_or("");
    if (tool == "rm") continue;
    if (tool == "nvlink") continue;  // the device link
    if (tool == "fatbinary" && has_word(w, "-link")) continue;
    if (tool == "fatbinary") {
      KILN_RETURN_IF_ERROR(set_once(plan.fatbinary, line, "fatbinary"));
      auto created = value_of(w, "--create");
      auto cmd = without_word(line, "--embedded-fatbin=");
      if (!created || !cmd) return failed_precondition("nvcc dry run: fatbinary without --create or --embedded-fatbin");
      plan.fatbin_file = *created;
      plan.fatbinary = *cmd;
    } else if (tool == "cudafe++") {
      KILN_RETURN_IF_ERROR(set_once(plan.front_end, line, "cudafe++"));
      auto id = value_of(w, "--module_id_file_name");
      if (!id) return failed_precondition("nvcc dry run: cudafe++ without --module_id_file_name");
      plan.module_id_file = *id;
      plan.front_end = without_word(line, "--gen_module_id_file").value_or(std::string(line));
    } else if (tool == "cicc") {
      KILN_RETURN_IF_ERROR(set_once(plan.cicc, line, "cicc"));
      auto id = value_of(w, "--module_id_file_name");
      auto include = value_of(w, "--include_file_name");
      if (!id || !include) {
        return failed_precondition("nvcc dry run: cicc without --module_id_file_name or --include_file_name");
      }
      if (!plan.module_id_file.empty() && *id != plan.module_id_file) {
        return failed_precondition("nvcc dry run: cicc and cudafe++ name different module id files");
      }
      if (include->find('/') != std::string::npos || include->starts_with(".")) {
        return failed_precondition("nvcc dry run: cicc's fat binary include is not a plain file name");
      }
      plan.fatbin_include = *include;
      plan.cicc = without_word(line, "--gen_module_id_file").value_or(std::string(line));
    } else if (tool == "ptxas") {
      KILN_RETURN_IF_ERROR(set_once(plan.ptxas, line, "ptxas (one target only)"));
    } else if (has_word(w, "-E") && output.ends_with(".cpp4.ii")) {
      KILN_RETURN_IF_ERROR(set_once(plan.host_preprocess, line, "host preprocessing"));
    } else if (has_word(w, "-E") && output.ends_with(".cpp1.ii")) {
      KILN_RETURN_IF_ERROR(set_once(plan.device_preprocess, line, "device preprocessing"));
    } else if (has_word(w, "-c") &&
               std::any_of(w.begin(), w.end(), [](const std::string& x) { return x.ends_with(".cudafe1.cpp"); })) {
      KILN_RETURN_IF_ERROR(set_once(plan.host_compile, line, "host compile"));
      plan.host_compiler = w.front();
    } else if (has_word(w, "-c") && line.find("link.stub") != std::string_view::npos) {
      dlink_object = output;  // the device link's registration object
    } else if (has_word(w, "-shared") && !has_word(w, "-c") && !output.empty()) {
      KILN_RETURN_IF_ERROR(set_once(plan.link, line, "link"));
    } else {
      return failed_precondition("nvcc dry run: unexpected step '" + tool + "'");
    }
  }
  struct Required {
    const std::string& value;
    const char* what;
  };
  for (const Required& r : {Required{plan.host_preprocess, "host preprocessing"},
                            {plan.front_end, "cudafe++"},
                            {plan.device_preprocess, "device preprocessing"},
                            {plan.cicc, "cicc"},
                            {plan.ptxas, "ptxas"},
                            {plan.fatbinary, "fatbinary"},
                            {plan.host_compile, "host compile"},
                            {plan.link, "link"},
                            {dlink_object, "device link"},
                            {plan.module_id_file, "module id file"}}) {
    if (r.value.empty()) return failed_precondition(std::string("nvcc dry run: no ") + r.what + " step");
  }
  if (count_of(plan.link, dlink_object) != 1) {
    return failed_precondition("nvcc dry run: the link does not take the device link's object once");
  }
  for (const auto* path : {&plan.module_id_file, &plan.fatbin_file}) {
    if (!path->starts_with(keep_dir + "/")) {
      return failed_precondition("nvcc dry run: " + *path + " is not in " + keep_dir);
    }
  }
  plan.fatbin_object = keep_dir + "/kiln_fatbin.o";
  replace_all(plan.link, dlink_object, plan.fatbin_object);
  return plan;
}

NvccPlan rewrite_plan(const NvccPlan& plan, std::string_view from, std::string_view to) {
  NvccPlan out = plan;
  for (std::string* cmd : {&out.host_preprocess, &out.front_end, &out.device_preprocess, &out.cicc, &out.ptxas,
                           &out.fatbinary, &out.host_compile, &out.link}) {
    replace_all(*cmd, from, to);
  }
  return out;
}

std::string nvcc_module_id(std::string_view digest, std::string_view source_name) {
  std::string name;
  for (char c : source_name) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  const std::string_view a = digest.substr(0, 8);
  const std::string_view b = digest.size() >= 16 ? digest.substr(8, 8) : a;
  return "_" + std::string(a) + "_" + std::to_string(name.size()) + "_" + name + "_" + std::string(b);
}

NvccGraphFiles nvcc_graph(const NvccPlan& plan, std::string_view module_id) {
  NvccGraphFiles g;
  const std::string& k = plan.keep_dir;
  const std::string assembly = k + "/kiln_fatbin.s";
  g.files.emplace_back(plan.module_id_file, std::string(module_id));
  // What cicc's stub includes for the fat binary: the wrapper the runtime registers, pointing at the data
  // the assembly below puts where nvcc's own include would have (section .nv_fatbin, 8-byte aligned).
  g.files.emplace_back(
      k + "/" + plan.fatbin_include, std::string(R"(// The fat binary is linked in from its own object, kiln_fatbin.s.
#ifndef __SKIP_INTERNAL_FATBINARY_HEADERS
#include "fatbinary_section.h"
#endif
#define __CUDAFATBINSECTION ".nvFatBinSegment"
#define __CUDAFATBINDATASECTION ".nv_fatbin"
#ifdef __cplusplus
extern "C" {
#endif
extern const unsigned long long )") + std::string(kFatbinSymbol) +
                                         R"([] __attribute__((visibility("hidden")));
static const __fatBinC_Wrapper_t __fatDeviceText __attribute__((aligned(8)))
    __attribute__((section(__CUDAFATBINSECTION))) = {FATBINC_MAGIC, FATBINC_VERSION, )" +
                                         std::string(kFatbinSymbol) + R"(, 0};
#ifdef __cplusplus
}
#endif
)");
  g.files.emplace_back(assembly, "\t.section .nv_fatbin, \"a\"\n\t.align 8\n\t.globl " + std::string(kFatbinSymbol) +
                                     "\n\t.hidden " + std::string(kFatbinSymbol) + "\n" + std::string(kFatbinSymbol) +
                                     ":\n\t.incbin \"" + plan.fatbin_file +
                                     "\"\n\t.section .note.GNU-stack,\"\",@progbits\n");

  auto quote = [](const std::string& v) {
    std::string q = "'";
    for (char c : v) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  auto step = [&](const std::string& cmd, std::string_view name) {
    const std::string base = k + "/" + std::string(name);
    return "{ " + cmd + "; } >" + quote(base + ".out") + " 2>" + quote(base + ".err");
  };
  const std::string fatbin_object_cmd =
      plan.host_compiler + " -c " + quote(assembly) + " -o " + quote(plan.fatbin_object);
  std::string& s = g.script;
  s = "# nvcc's steps for one build, as a graph (kiln-compiler)\n";
  for (const auto& [name, value] : plan.env) s += "export " + name + "=" + quote(value) + "\n";
  // Host front end beside the device front end; then ptxas beside the host compile.
  s += "( " + step(plan.host_preprocess, "host-preprocess") + " && " + step(plan.front_end, "cudafe++") + " ) &\n";
  s += "host=$!\n";
  s += "if " + step(plan.device_preprocess, "device-preprocess") + " && " + step(plan.cicc, "cicc") +
       "; then :; else wait $host; exit 1; fi\n";
  s += "( " + step(plan.ptxas, "ptxas") + " && " + step(plan.fatbinary, "fatbinary") + " && " +
       step(fatbin_object_cmd, "fatbin-object") + " ) &\n";
  s += "device=$!\n";
  s += "if wait $host && " + step(plan.host_compile, "host-compile") + "; then :; else wait $device; exit 1; fi\n";
  s += "wait $device || exit 1\n";
  s += step(plan.link, "link") + " || exit 1\n";
  return g;
}

}  // namespace kiln::compiler
