// Strict validation of task.yaml (DESIGN §3). Every error is one line naming the file, the key path
// and what was expected; unknown keys are errors so that a typo never silently changes a campaign.
#include "kiln/task/task.h"

#include <yaml-cpp/yaml.h>

#include <atomic>
#include <charconv>
#include <cmath>
#include <cctype>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <set>

#include "kiln/core/hash.h"
#include "kiln/kernel_abi.h"
#include "paths.h"

namespace kiln::task {

namespace {

constexpr std::string_view kTaskFile = "task.yaml";
constexpr std::string_view kInstructionsFile = "instructions.md";
// Values longer than this are cut in error messages, which must stay one readable line.
constexpr size_t kMaxQuotedChars = 60;

struct DTypeName {
  DType dtype;
  std::string_view name;
  size_t bytes;
};
constexpr DTypeName kDTypes[] = {
    {DType::kF32, "fp32", 4},  {DType::kF16, "fp16", 2},  {DType::kBF16, "bf16", 2}, {DType::kF64, "fp64", 8},
    {DType::kI32, "int32", 4}, {DType::kI64, "int64", 8}, {DType::kI8, "int8", 1},   {DType::kU8, "uint8", 1},
};

// Validation errors travel as this exception inside this file only; parse_task turns it into a Status.
struct SpecError {
  std::string message;
};

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMaxQuotedChars; ++i) {
    char c = s[i];
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out.push_back('?');
    } else {
      out.push_back(c);
    }
  }
  if (s.size() > kMaxQuotedChars) out += "...";
  out.push_back('"');
  return out;
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return quote(n.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "nothing";
  }
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SpecError{std::string(kTaskFile) + ": " + (path.empty() ? "" : path + ": ") + what};
}

std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
std::string item(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

// A state_dict key: identifiers joined by dots ("layers.0.weight": a digit segment is a list index).
bool is_state_key(std::string_view s) {
  if (s.empty() || s.size() > 128 || s.front() == '.' || s.back() == '.') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    (c == '.' && s[i - 1] != '.');
    if (!ok) return false;
  }
  return true;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

bool is_lower_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

std::optional<int64_t> to_int(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<double> to_double(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// The entries of a map in file order. Keys must be strings, unique, and (when `allowed` is not empty)
// one of `allowed`; `required` keys must be present.
std::vector<std::pair<std::string, YAML::Node>> entries(const YAML::Node& n, const std::string& path,
                                                        std::initializer_list<std::string_view> allowed = {},
                                                        std::initializer_list<std::string_view> required = {}) {
  if (!n.IsMap()) fail(path, "expected a map, got " + describe(n));
  std::vector<std::pair<std::string, YAML::Node>> out;
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar()) fail(path, "expected string keys, got " + describe(it->first));
    std::string key = it->first.Scalar();
    if (!seen.insert(key).second) fail(child(path, key), "duplicate key");
    if (allowed.size() != 0) {
      bool known = false;
      for (auto a : allowed) known = known || a == key;
      if (!known) fail(child(path, key), "unknown key");
    }
    out.emplace_back(key, it->second);
  }
  for (auto r : required)
    if (!seen.count(std::string(r))) fail(child(path, r), "missing (required)");
  return out;
}

const YAML::Node* find(const std::vector<std::pair<std::string, YAML::Node>>& m, std::string_view key) {
  for (const auto& [k, v] : m)
    if (k == key) return &v;
  return nullptr;
}

std::string get_string(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar() || n.Scalar().empty()) fail(path, "expected a string, got " + describe(n));
  return n.Scalar();
}

int64_t get_positive_int(const YAML::Node& n, const std::string& path) {
  auto v = n.IsScalar() ? to_int(n.Scalar()) : std::nullopt;
  if (!v || *v <= 0) fail(path, "expected a positive integer, got " + describe(n));
  return *v;
}

double get_number(const YAML::Node& n, const std::string& path) {
  auto v = n.IsScalar() ? to_double(n.Scalar()) : std::nullopt;
  if (!v) fail(path, "expected a number, got " + describe(n));
  return *v;
}

double get_non_negative(const YAML::Node& n, const std::string& path) {
  auto v = n.IsScalar() ? to_double(n.Scalar()) : std::nullopt;
  if (!v || *v < 0) fail(path, "expected a number >= 0, got " + describe(n));
  return *v;
}

DType get_dtype(const YAML::Node& n, const std::string& path) {
  auto d = n.IsScalar() ? parse_dtype(n.Scalar()) : Result<DType>(invalid_argument(""));
  if (!d.is_ok()) {
    std::string names;
    for (const auto& t : kDTypes) names += (names.empty() ? "" : ", ") + std::string(t.name);
    fail(path, "expected one of " + names + ", got " + describe(n));
  }
  return *d;
}

// "uniform(0.5, 1.5)" -> {"uniform", "0.5", "1.5"}; no parentheses -> just the name.
std::vector<std::string> split_call(std::string s) {
  std::string compact;
  for (char c : s)
    if (c != ' ' && c != '\t') compact.push_back(c);
  std::vector<std::string> parts;
  size_t open = compact.find('(');
  if (open == std::string::npos) return {compact};
  if (compact.back() != ')') return {};
  parts.push_back(compact.substr(0, open));
  std::string args = compact.substr(open + 1, compact.size() - open - 2);
  size_t pos = 0;
  while (true) {
    size_t comma = args.find(',', pos);
    parts.push_back(args.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return parts;
}

void parse_init(const YAML::Node& n, const std::string& path, TensorSpec& t) {
  const std::string expected = "expected normal, uniform(a,b), int(a,b), zeros or ones, got " + describe(n);
  if (!n.IsScalar()) fail(path, expected);
  auto parts = split_call(n.Scalar());
  if (parts.size() == 1 && parts[0] == "normal") {
    t.init = InitKind::kNormal;
    t.init_a = 0;
    t.init_b = 1;
  } else if (parts.size() == 1 && parts[0] == "zeros") {
    t.init = InitKind::kZeros;
  } else if (parts.size() == 1 && parts[0] == "ones") {
    t.init = InitKind::kOnes;
  } else if (parts.size() == 3 && parts[0] == "uniform") {
    auto a = to_double(parts[1]), b = to_double(parts[2]);
    if (!a || !b || !(*a < *b)) fail(path, "expected uniform(a,b) with numbers a < b, got " + describe(n));
    t.init = InitKind::kUniform;
    t.init_a = *a;
    t.init_b = *b;
  } else if (parts.size() == 3 && parts[0] == "int") {
    auto a = to_int(parts[1]), b = to_int(parts[2]);
    if (!a || !b || *a > *b) fail(path, "expected int(a,b) with integers a <= b, got " + describe(n));
    t.init = InitKind::kInt;
    t.init_a = static_cast<double>(*a);
    t.init_b = static_cast<double>(*b);
  } else {
    fail(path, expected);
  }
}

// Bounds on what a package may ask of every service that reads it: each case is allocated, filled and run
// by the tester and compared on the host, and the whole spec travels with every job.
constexpr size_t kMaxCorrectnessCases = 64;
constexpr size_t kMaxBenchmarkCases = 16;
constexpr int64_t kMaxSeeds = 16;
constexpr size_t kMaxDimsPerCase = 16;
constexpr int64_t kMaxTensorBytes = int64_t{16} << 30;
constexpr int64_t kMaxCaseBytes = int64_t{64} << 30;
// The kernel ABI passes tensors and scalars by count (int32), and every one is filled, copied and compared
// per case and seed; template parameters multiply into the tuner's search space.
constexpr size_t kMaxTensors = 64;  // inputs, and outputs, each
constexpr size_t kMaxScalars = 64;
constexpr size_t kMaxParams = 16;
constexpr size_t kMaxParamValues = 64;
constexpr int64_t kMaxParamCombinations = 65536;

std::vector<TensorSpec> parse_tensors(const YAML::Node& n, const std::string& path, bool is_input) {
  if (!n.IsSequence()) fail(path, "expected a list of tensors, got " + describe(n));
  if (n.size() > kMaxTensors)
    fail(path, std::to_string(n.size()) + " tensors; at most " + std::to_string(kMaxTensors) + " are allowed");
  std::vector<TensorSpec> out;
  for (size_t i = 0; i < n.size(); ++i) {
    std::string p = item(path, i);
    auto m = is_input ? entries(n[i], p, {"name", "dtype", "shape", "init", "param"}, {"name", "dtype", "shape"})
                      : entries(n[i], p, {"name", "dtype", "shape"}, {"name", "dtype", "shape"});
    TensorSpec t;
    t.name = get_string(*find(m, "name"), child(p, "name"));
    if (!is_identifier(t.name)) fail(child(p, "name"), "expected an identifier, got " + quote(t.name));
    t.dtype = get_dtype(*find(m, "dtype"), child(p, "dtype"));
    const YAML::Node& shape = *find(m, "shape");
    std::string sp = child(p, "shape");
    if (!shape.IsSequence()) fail(sp, "expected a list of dim names or positive integers, got " + describe(shape));
    if (shape.size() > KILN_MAX_DIMS)
      fail(sp, "expected at most " + std::to_string(KILN_MAX_DIMS) + " dims, got " + std::to_string(shape.size()));
    for (size_t d = 0; d < shape.size(); ++d) {
      const YAML::Node& dim = shape[d];
      std::string dp = item(sp, d);
      if (!dim.IsScalar()) fail(dp, "expected a dim name or a positive integer, got " + describe(dim));
      const std::string& s = dim.Scalar();
      if (is_identifier(s)) {
        t.shape.push_back(s);
      } else {
        auto v = to_int(s);
        if (!v || *v <= 0) fail(dp, "expected a dim name or a positive integer, got " + describe(dim));
        t.shape.push_back(std::to_string(*v));
      }
    }
    if (const YAML::Node* init = find(m, "init")) parse_init(*init, child(p, "init"), t);
    if (const YAML::Node* param = find(m, "param")) {
      t.param = get_string(*param, child(p, "param"));
      if (!is_state_key(t.param))
        fail(child(p, "param"), "expected a state_dict key of the module (\"conv.weight\"), got " + quote(t.param));
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<Dims> parse_cases(const YAML::Node& n, const std::string& path, size_t max_cases) {
  if (!n.IsSequence() || n.size() == 0) fail(path, "expected a non-empty list of cases, got " + describe(n));
  if (n.size() > max_cases)
    fail(path, std::to_string(n.size()) + " cases; at most " + std::to_string(max_cases) + " are allowed");
  std::vector<Dims> out;
  for (size_t i = 0; i < n.size(); ++i) {
    std::string p = item(path, i);
    Dims dims;
    for (const auto& [k, v] : entries(n[i], p)) {
      if (!is_identifier(k)) fail(child(p, k), "expected a dim name (an identifier)");
      dims[k] = get_positive_int(v, child(p, k));
    }
    if (dims.size() > kMaxDimsPerCase)
      fail(p, std::to_string(dims.size()) + " dims; at most " + std::to_string(kMaxDimsPerCase) + " are allowed");
    out.push_back(std::move(dims));
  }
  return out;
}

bool is_param_value(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '+')) return false;
  return true;
}

// Every dim a shape names must be defined by every case: the tester cannot size a tensor otherwise. And
// every tensor of a case must have a size that is representable and can be allocated: the element count
// and the byte count are multiplied with overflow checks.
void check_dims_defined(const TaskSpec& spec, const std::vector<Dims>& cases, const std::string& path) {
  for (size_t i = 0; i < cases.size(); ++i) {
    int64_t case_bytes = 0;
    for (const auto* group : {&spec.inputs, &spec.outputs}) {
      for (const TensorSpec& t : *group) {
        int64_t bytes = static_cast<int64_t>(dtype_bytes(t.dtype));
        int64_t elements = 1;
        for (const std::string& d : t.shape) {
          int64_t extent = 0;
          if (std::isdigit(static_cast<unsigned char>(d[0]))) {
            extent = std::strtoll(d.c_str(), nullptr, 10);
          } else if (auto it = cases[i].find(d); it != cases[i].end()) {
            extent = it->second;
          } else {
            fail(item(path, i), "dim " + d + " is not defined (the shape of " + t.name + " uses it)");
          }
          if (__builtin_mul_overflow(elements, extent, &elements))
            fail(item(path, i), t.name + ": the element count of its shape overflows int64");
        }
        if (__builtin_mul_overflow(bytes, elements, &bytes) || bytes > kMaxTensorBytes)
          fail(item(path, i), t.name + " would be over " + std::to_string(kMaxTensorBytes >> 30) + " GiB");
        case_bytes += bytes;
        if (case_bytes > kMaxCaseBytes)
          fail(item(path, i), "the tensors of this case would be over " + std::to_string(kMaxCaseBytes >> 30) + " GiB");
      }
    }
  }
}

TaskSpec parse_yaml(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw SpecError{std::string(kTaskFile) + ": line " + std::to_string(e.mark.line + 1) + ": " + e.msg};
  }
  if (!root.IsMap()) fail("", "expected a map of keys at the top level, got " + describe(root));
  auto top = entries(root, "",
                     {"name", "op", "backend", "dtype", "inputs", "outputs", "scalars", "correctness", "benchmark",
                      "params", "baselines"},
                     {"name", "backend", "dtype", "inputs", "outputs", "correctness", "benchmark"});
  TaskSpec spec;
  spec.name = get_string(*find(top, "name"), "name");
  if (!is_lower_name(spec.name)) fail("name", "expected [a-z0-9_]+, got " + quote(spec.name));
  spec.op = spec.name;  // the registry op defaults to the task name
  if (const YAML::Node* op = find(top, "op")) {
    spec.op = get_string(*op, "op");
    if (!is_lower_name(spec.op)) fail("op", "expected [a-z0-9_]+, got " + quote(spec.op));
  }
  const std::string backend = get_string(*find(top, "backend"), "backend");
  auto parsed_backend = proto::parse_backend(backend);
  if (!parsed_backend.is_ok()) fail("backend", "expected cuda or cpu, got " + quote(backend));
  spec.backend = *parsed_backend;
  spec.dtype = std::string(dtype_name(get_dtype(*find(top, "dtype"), "dtype")));

  spec.inputs = parse_tensors(*find(top, "inputs"), "inputs", true);
  spec.outputs = parse_tensors(*find(top, "outputs"), "outputs", false);
  if (spec.outputs.empty()) fail("outputs", "expected at least one output");
  std::map<std::string, std::string> tensor_paths;
  for (size_t i = 0; i < spec.inputs.size() + spec.outputs.size(); ++i) {
    bool in = i < spec.inputs.size();
    const TensorSpec& t = in ? spec.inputs[i] : spec.outputs[i - spec.inputs.size()];
    std::string p = item(in ? "inputs" : "outputs", in ? i : i - spec.inputs.size());
    auto [it, fresh] = tensor_paths.emplace(t.name, p);
    if (!fresh) fail(child(p, "name"), quote(t.name) + " is already used by " + it->second);
  }

  if (const YAML::Node* scalars = find(top, "scalars"); scalars && !scalars->IsNull()) {
    auto named = entries(*scalars, "scalars");
    if (named.size() > kMaxScalars)
      fail("scalars",
           std::to_string(named.size()) + " scalars; at most " + std::to_string(kMaxScalars) + " are allowed");
    for (const auto& [k, v] : named) {
      if (!is_identifier(k)) fail(child("scalars", k), "expected an identifier as the scalar name");
      spec.scalars.emplace_back(k, get_number(v, child("scalars", k)));
    }
  }

  auto correctness = entries(*find(top, "correctness"), "correctness", {"cases", "seeds", "rtol", "atol"}, {"cases"});
  spec.correctness_cases = parse_cases(*find(correctness, "cases"), "correctness.cases", kMaxCorrectnessCases);
  if (const YAML::Node* seeds = find(correctness, "seeds")) {
    spec.seeds = get_positive_int(*seeds, "correctness.seeds");
    if (spec.seeds > kMaxSeeds) fail("correctness.seeds", "at most " + std::to_string(kMaxSeeds));
  }
  if (const YAML::Node* rtol = find(correctness, "rtol")) spec.rtol = get_non_negative(*rtol, "correctness.rtol");
  if (const YAML::Node* atol = find(correctness, "atol")) spec.atol = get_non_negative(*atol, "correctness.atol");

  auto benchmark = entries(*find(top, "benchmark"), "benchmark", {"cases"}, {"cases"});
  spec.benchmark_cases = parse_cases(*find(benchmark, "cases"), "benchmark.cases", kMaxBenchmarkCases);

  check_dims_defined(spec, spec.correctness_cases, "correctness.cases");
  check_dims_defined(spec, spec.benchmark_cases, "benchmark.cases");

  if (const YAML::Node* params = find(top, "params"); params && !params->IsNull()) {
    auto named = entries(*params, "params");
    if (named.size() > kMaxParams)
      fail("params",
           std::to_string(named.size()) + " parameters; at most " + std::to_string(kMaxParams) + " are allowed");
    int64_t combinations = 1;
    for (const auto& [k, v] : named) {
      std::string p = child("params", k);
      if (!is_identifier(k)) fail(p, "expected an identifier as the parameter name (it becomes a -D define)");
      if (!v.IsSequence() || v.size() == 0) fail(p, "expected a non-empty list of values, got " + describe(v));
      if (v.size() > kMaxParamValues)
        fail(p, std::to_string(v.size()) + " values; at most " + std::to_string(kMaxParamValues) + " are allowed");
      combinations *= static_cast<int64_t>(v.size());  // <= 65536 * 64 before the check: no overflow
      if (combinations > kMaxParamCombinations)
        fail(p, "the parameters would make over " + std::to_string(kMaxParamCombinations) + " combinations");
      std::vector<std::string> values;
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].IsScalar() || !is_param_value(v[i].Scalar()))
          fail(item(p, i), "expected a number or a name, got " + describe(v[i]));
        values.push_back(v[i].Scalar());
      }
      spec.params.emplace_back(k, std::move(values));
    }
  }

  if (const YAML::Node* baselines = find(top, "baselines"); baselines && !baselines->IsNull()) {
    if (!baselines->IsSequence()) fail("baselines", "expected a list of names, got " + describe(*baselines));
    for (size_t i = 0; i < baselines->size(); ++i) {
      std::string name = get_string((*baselines)[i], item("baselines", i));
      if (!is_param_value(name)) fail(item("baselines", i), "expected a baseline name, got " + quote(name));
      spec.baselines.push_back(std::move(name));
    }
  }
  return spec;
}

}  // namespace

Result<DType> parse_dtype(std::string_view name) {
  for (const auto& t : kDTypes)
    if (t.name == name) return t.dtype;
  return invalid_argument("unknown dtype " + quote(name));
}

std::string_view dtype_name(DType d) {
  for (const auto& t : kDTypes)
    if (t.dtype == d) return t.name;
  return "unknown";
}

size_t dtype_bytes(DType d) {
  for (const auto& t : kDTypes)
    if (t.dtype == d) return t.bytes;
  return 0;
}

namespace {
std::atomic<uint64_t> parses{0};

// What needs reference.py has one: inputs that stand for module state, the torch baselines.
Status check_torch_use(const TaskSpec& spec) {
  if (!spec.torch_source.empty()) return Status::ok();
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (!spec.inputs[i].param.empty())
      return invalid_argument(std::string(kTaskFile) + ": inputs[" + std::to_string(i) +
                              "].param: names a module parameter, but the package has no reference.py");
  }
  for (size_t i = 0; i < spec.baselines.size(); ++i) {
    if (spec.baselines[i].rfind("torch_", 0) == 0)
      return invalid_argument(std::string(kTaskFile) + ": baselines[" + std::to_string(i) + "]: " + spec.baselines[i] +
                              " runs the task's PyTorch module, but the package has no reference.py");
  }
  return Status::ok();
}
}  // namespace

uint64_t parse_count() { return parses.load(std::memory_order_relaxed); }

Result<TaskSpec> parse_task(const proto::FileMap& files) {
  parses.fetch_add(1, std::memory_order_relaxed);
  for (const auto& [name, content] : files) {
    auto parts = detail::path_components(name);
    if (!parts.is_ok()) return parts.status();
    if (parts->empty()) return invalid_argument(quote(name) + ": empty file name in package");
  }
  auto yaml = files.find(std::string(kTaskFile));
  if (yaml == files.end()) return invalid_argument(std::string(kTaskFile) + ": missing (every package needs one)");

  TaskSpec spec;
  try {
    spec = parse_yaml(yaml->second.data);
  } catch (const SpecError& e) {
    return invalid_argument(e.message);
  } catch (const YAML::Exception& e) {
    return invalid_argument(std::string(kTaskFile) + ": " + e.msg);
  }

  const std::string ext = "." + std::string(proto::source_extension(spec.backend));
  spec.reference_file = "reference" + ext;
  spec.kernel_file = "kernel" + ext;
  const auto torch = files.find(TaskSpec::kTorchReferenceFile);
  if (torch != files.end()) {
    spec.torch_source = torch->second.data;
    if (!files.count(spec.reference_file)) spec.reference_file = TaskSpec::kTorchReferenceFile;
  }
  for (const std::string& f : {spec.reference_file, spec.kernel_file})
    if (!files.count(f))
      return invalid_argument(f + ": missing (required for backend " + std::string(proto::name(spec.backend)) +
                              (f == spec.reference_file ? "; or a PyTorch reference.py" : "") + ")");
  KILN_RETURN_IF_ERROR(check_torch_use(spec));

  auto regions = find_regions(files.at(spec.kernel_file).data);
  if (!regions.is_ok()) return invalid_argument(spec.kernel_file + ": " + regions.status().message());

  if (auto it = files.find(std::string(kInstructionsFile)); it != files.end()) spec.instructions = it->second.data;
  return spec;
}

Result<std::vector<int64_t>> shape_for(const TensorSpec& t, const Dims& dims) {
  std::vector<int64_t> shape;
  shape.reserve(t.shape.size());
  for (const std::string& d : t.shape) {
    if (auto v = to_int(d)) {
      shape.push_back(*v);
      continue;
    }
    auto it = dims.find(d);
    if (it == dims.end())
      return invalid_argument("dim " + d + " of " + t.name + " is not defined in case " + dims_string(dims));
    shape.push_back(it->second);
  }
  return shape;
}

std::string dims_string(const Dims& dims) {
  std::string out;
  for (const auto& [k, v] : dims) {
    if (!out.empty()) out.push_back(',');
    out += k + "=" + std::to_string(v);
  }
  return out;
}

}  // namespace kiln::task
