// `kiln task import`: the problem is read by a Python helper (import_problem.py, compiled in as a string)
// run by an interpreter with torch; it answers with task.yaml's text, or with one line naming what cannot
// be imported. This side checks the options, writes the package (reference.py is the problem file as it
// is) and validates it as `kiln task validate` would.
#include "import_cmd.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "import_problem_script.h"
#include "kiln/core/files.h"
#include "kiln/task/task.h"

namespace kiln::cli {

namespace {

namespace fs = std::filesystem;

constexpr int kExitRefused = 2;  // the helper's: what cannot be imported, one line
constexpr int kExitNoTorch = 3;  // the helper's: the interpreter has no torch
constexpr size_t kMaxHelperOutput = 1 << 20;

int fail_line(const std::string& line) {
  std::fprintf(stderr, "kiln: %s\n", line.c_str());
  return 1;
}

// Runs argv to completion with stdout and stderr captured together.
Result<int> run_capture(const std::vector<std::string>& args, std::string& output) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return unavailable(std::string("pipe: ") + std::strerror(errno));
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return unavailable(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "exec: %s\n", std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0 && output.size() < kMaxHelperOutput) output.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// The task's name from the problem's file name: "1_Square_matrix_multiplication_.py" ->
// "1_square_matrix_multiplication".
std::string task_name(const std::string& problem) {
  std::string stem = fs::path(problem).stem().string(), name;
  for (char c : stem) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9');
    if (ok)
      name.push_back(l);
    else if (!name.empty() && name.back() != '_')
      name.push_back('_');
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name.empty() ? "imported" : name;
}

Status check_options(const ImportOptions& o) {
  if (o.backend != "cpu" && o.backend != "cuda")
    return invalid_argument("--backend: expected cpu or cuda, got \"" + o.backend + "\"");
  static const std::regex kSet("[A-Za-z_][A-Za-z0-9_]*=[1-9][0-9]{0,17}");
  for (const auto& s : o.sets)
    if (!std::regex_match(s, kSet))
      return invalid_argument("--set " + s + ": expected NAME=VALUE with a positive integer (a case's size)");
  if (!fs::is_regular_file(o.problem)) return invalid_argument(o.problem + ": no such file");
  std::error_code ec;
  if (fs::exists(o.out_dir, ec) && !(fs::is_directory(o.out_dir, ec) && fs::is_empty(o.out_dir, ec)))
    return invalid_argument(o.out_dir + ": already exists and is not an empty folder");
  if (::access(o.python.c_str(), X_OK) != 0)
    return invalid_argument("--python " + o.python + ": not an executable (an interpreter with torch is needed)");
  return Status::ok();
}

// task.yaml's text and the helper's notes, or the helper's one line.
Result<std::pair<std::string, std::vector<std::string>>> read_problem(const ImportOptions& o) {
  TempDir tmp("kiln-import");
  const std::string out = tmp.path() + "/result.json";
  std::vector<std::string> args{o.python, "-I", "-c",     kImportProblemScript, "--file",    o.problem,
                                "--out",  out,  "--name", task_name(o.problem), "--backend", o.backend};
  for (const auto& s : o.sets) args.insert(args.end(), {"--set", s});
  std::string output;
  auto rc = run_capture(args, output);
  if (!rc.is_ok()) return rc.status();
  if (*rc == kExitNoTorch)
    return invalid_argument(o.python + " has no torch (" + last_line(output) +
                            "); name an interpreter that has it with --python");
  if (*rc != 0) {
    std::string line = last_line(output);
    if (*rc != kExitRefused) line = o.python + " exited with " + std::to_string(*rc) + ": " + line;
    return invalid_argument(line.empty() ? o.problem + ": cannot import" : line);
  }
  auto text = read_file(out);
  if (!text.is_ok()) return text.status();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j["yaml"].is_string()) return internal_error("the import helper wrote no task");
  return std::pair{j["yaml"].get<std::string>(), j.value("notes", std::vector<std::string>{})};
}

std::string shape_text(const task::TensorSpec& t) {
  std::string s = std::string(task::dtype_name(t.dtype)) + " [";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + t.shape[i];
  return s + "]";
}

// What the kernel gets, one line each, for the kernel's comment and instructions.md.
std::string tensor_lines(const task::TaskSpec& spec, const std::string& prefix) {
  std::string s;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const auto& t = spec.inputs[i];
    s += prefix + "inputs[" + std::to_string(i) + "]  " + t.name + ": " + shape_text(t) +
         (t.param.empty() ? ", an argument of forward()" : ", the module's " + t.param) + "\n";
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i)
    s += prefix + "outputs[" + std::to_string(i) + "] " + spec.outputs[i].name + ": " + shape_text(spec.outputs[i]) +
         ", what forward() returns\n";
  return s;
}

std::string empty_kernel(const task::TaskSpec& spec, bool cuda) {
  return "// Program 0 of " + spec.name +
         ", imported from a KernelBench problem: the editable region is empty, so only an LLM or an\n"
         "// external agent can propose, and the first proposal writes the whole kernel, kiln_entry included:\n"
         "//\n"
         "//   extern \"C\" KILN_EXPORT int kiln_entry(const kiln_args* a);  // 0 on success\n"
         "//\n"
         "// computing what reference.py's Model.forward() returns. The tensors (dims: the problem's constants):\n" +
         tensor_lines(spec, "//   a->") +
         (cuda ? "// Work is enqueued on a->stream (a cudaStream_t); the kernel must not synchronize the device.\n"
               : "") +
         "#include \"kiln/kernel_abi.h\"\n\n// [EVOLVE_START]\n// [EVOLVE_END]\n";
}

std::string instructions(const task::TaskSpec& spec, const ImportOptions& o, const std::vector<std::string>& notes) {
  std::string s = "# " + spec.name + "\n\nImported by `kiln task import` from `" +
                  fs::path(o.problem).filename().string() +
                  "` (KernelBench's format), kept as reference.py: the reference is its `Model`, run by PyTorch. "
                  "For each case Kiln sets the case's dims as the file's constants, builds "
                  "`Model(*get_init_inputs())` with torch's seed 0, gives it the parameters it draws, and the "
                  "kernel must return what `forward()` does.\n\nThe kernel's tensors, in order:\n\n";
  s += tensor_lines(spec, "- ");
  s += "\nBenchmark case: " + task::dims_string(spec.benchmark_cases[0]) + ".\n\n";
  if (o.kernel.empty())
    s += "Program 0 is an empty editable region: only an LLM or an external agent can propose for this task "
         "(the tuner has nothing to tune), and the first proposal writes the whole kernel.\n";
  else
    s += "Program 0 is `" + fs::path(o.kernel).filename().string() + "`.\n";
  for (const auto& n : notes) s += "\nNote: " + n + ".\n";
  return s;
}

}  // namespace

int cmd_task_import(const ImportOptions& o) {
  if (auto st = check_options(o); !st.is_ok()) return fail_line(st.message());
  const bool cuda = o.backend == "cuda";
  const std::string kernel_file = cuda ? "kernel.cu" : "kernel.cpp";
  std::string kernel;
  if (!o.kernel.empty()) {
    auto k = read_file(o.kernel);
    if (!k.is_ok()) return fail_line("--kernel " + o.kernel + ": " + k.status().message());
    if (auto r = task::find_regions(*k); !r.is_ok() || r->empty())
      return fail_line("--kernel " + o.kernel + ": " + (r.is_ok() ? "no [EVOLVE_START] region" : r.status().message()));
    kernel = *k;
  }
  auto source = read_file(o.problem);
  if (!source.is_ok()) return fail_line(o.problem + ": " + source.status().message());
  auto problem = read_problem(o);
  if (!problem.is_ok()) return fail_line(problem.status().message());
  const auto& [yaml, notes] = *problem;

  proto::FileMap files;
  files["task.yaml"] = proto::Bytes{yaml};
  files["reference.py"] = proto::Bytes{*source};
  files[kernel_file] = proto::Bytes{kernel.empty() ? "// [EVOLVE_START]\n// [EVOLVE_END]\n" : kernel};
  auto spec = task::parse_task(files);
  if (!spec.is_ok()) return fail_line(o.problem + ": the imported task does not validate: " + spec.status().message());
  if (kernel.empty()) files[kernel_file] = proto::Bytes{empty_kernel(*spec, cuda)};
  files["instructions.md"] = proto::Bytes{instructions(*spec, o, notes)};
  if (auto again = task::parse_task(files); !again.is_ok())
    return fail_line(o.problem + ": the imported task does not validate: " + again.status().message());

  if (auto st = make_dirs(o.out_dir); !st.is_ok()) return fail_line(o.out_dir + ": " + st.message());
  for (const auto& [name, content] : files)
    if (auto st = write_file_atomic(o.out_dir + "/" + name, content.data); !st.is_ok())
      return fail_line(o.out_dir + "/" + name + ": " + st.message());
  std::printf("created %s from %s: %zu input(s), %zu correctness case(s), benchmark %s; program 0: %s\n",
              o.out_dir.c_str(), o.problem.c_str(), spec->inputs.size(), spec->correctness_cases.size(),
              spec->benchmark_cases[0].empty() ? "(fixed sizes)" : task::dims_string(spec->benchmark_cases[0]).c_str(),
              kernel.empty() ? "an empty region (an LLM or an external agent proposes)" : o.kernel.c_str());
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
  return 0;
}

}  // namespace kiln::cli
