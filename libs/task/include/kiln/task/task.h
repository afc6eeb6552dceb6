// The task package (DESIGN §3): loading, strict validation and the editable regions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/ids.h"

namespace kiln::task {

// Element types of the kernel ABI (kiln/kernel_abi.h: KILN_F32 ...). Values are part of the ABI.
enum class DType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kF64 = 3, kI32 = 4, kI64 = 5, kI8 = 6, kU8 = 7 };
Result<DType> parse_dtype(std::string_view name);  // "fp32" | "fp16" | "bf16" | "fp64" | "int32" | ...
std::string_view dtype_name(DType d);
size_t dtype_bytes(DType d);

enum class InitKind { kNormal, kUniform, kInt, kZeros, kOnes };

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::string> shape;  // each a dim name ("B") or an integer literal ("4")
  InitKind init = InitKind::kNormal;
  double init_a = 0, init_b = 1;  // uniform(a,b) / int(a,b) bounds
  // An input that stands for a parameter or buffer of the task's PyTorch module (reference.py): its
  // state_dict key ("conv.weight"). The module runs with the values Kiln draws for it (`init`), and the
  // candidate gets them as an ordinary input. Empty: an argument of forward(), in file order.
  std::string param;
};

using Dims = std::map<std::string, int64_t>;  // one case: dim name -> size

struct TaskSpec {
  std::string name;  // [a-z0-9_]+
  std::string op;
  proto::Backend backend = proto::Backend::kCpu;
  std::string dtype;  // main dtype name, used in the kernel id
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<std::pair<std::string, double>> scalars;  // in file order
  std::vector<Dims> correctness_cases;
  int64_t seeds = 3;
  double rtol = 1e-3, atol = 1e-3;
  std::vector<Dims> benchmark_cases;
  std::vector<std::pair<std::string, std::vector<std::string>>> params;  // in file order
  std::vector<std::string> baselines;
  std::string kernel_file;     // kernel.cu | kernel.cpp
  std::string reference_file;  // reference.cu | reference.cpp, or reference.py (a PyTorch module)
  // reference.py's text when the package has one (KernelBench's format: class Model, get_inputs(),
  // get_init_inputs()): the reference when there is no C reference, and what the torch_eager and
  // torch_compile baselines run.
  std::string torch_source;
  bool torch_reference() const { return reference_file == kTorchReferenceFile; }
  static constexpr const char* kTorchReferenceFile = "reference.py";
  std::string instructions;  // instructions.md, may be empty
};

// Reads a package from a directory, or a .tar.gz or .zip of one, into memory (regular files only, bounded).
Result<proto::FileMap> load_package(const std::string& path);

// The package folders directly under `root` whose task is valid and runs on `backend`, sorted by path.
std::vector<std::string> package_dirs(const std::string& root, proto::Backend backend);

// Validates a package and returns its normalized spec. Errors name the file, the key path and what
// was expected: "task.yaml: correctness.cases[1].H: expected a positive integer, got \"abc\"".
Result<TaskSpec> parse_task(const proto::FileMap& files);
// How many times parse_task has run in this process. A worker parses each package once and hands the
// TaskSpec on (service::TaskSource); tests read the count before and after to hold it to that.
uint64_t parse_count();

// Shape of a tensor for one case; an error if a dim is missing from the case.
Result<std::vector<int64_t>> shape_for(const TensorSpec& t, const Dims& dims);
// "B=16,H=4096"
std::string dims_string(const Dims& dims);

// ------------------------------------------------------------------------- editable regions

inline constexpr std::string_view kEvolveStart = "[EVOLVE_START]";
inline constexpr std::string_view kEvolveEnd = "[EVOLVE_END]";

struct Region {
  size_t begin = 0;  // first byte after the line holding the start marker
  size_t end = 0;    // first byte of the line holding the end marker
};

// The editable regions of a source, in order; an error if markers are missing, unbalanced or nested.
Result<std::vector<Region>> find_regions(std::string_view source);
// Replaces the content of region `index` with `content`; everything else stays as it was.
Result<std::string> replace_region(std::string_view source, std::string_view content, size_t index = 0);
std::string region_text(std::string_view source, const Region& r);
// The text of every region of `source`, in order.
Result<std::vector<std::string>> region_bodies(std::string_view source);
// Whether every editable region of the package's kernel holds only whitespace (and comments are code
// here: a region with a comment is not empty). Such a program 0 has nothing to tune: only a proposer that
// writes code (an LLM, an external agent) can start from it.
bool kernel_regions_empty(const proto::FileMap& files, const TaskSpec& spec);

// ------------------------------------------------------------------------- proposals
//
// A proposal may change the bodies of the kernel's editable regions and nothing else: outside them,
// marker lines included, the candidate must be the task's kernel byte for byte. Whitespace counts too
// (a re-indented wrapper or CRLF line ends are refused, and the reason says that only whitespace
// differs), so what is built outside the regions is exactly what the task's author wrote. The check is
// textual: it fixes the bytes around the regions, not what a macro or an unclosed comment inside a
// region does to them; the sandbox and the tester's checks cover what a kernel then does.

// `original` with the body of region i replaced by bodies[i], one body per region. A body must not
// hold a marker; a body without a final newline gets one (the end marker keeps its own line).
Result<std::string> splice_regions(std::string_view original, const std::vector<std::string>& bodies);

// OK when `candidate` differs from `original` only inside editable regions; otherwise kInvalidArgument
// with the reason, naming the candidate's first differing line: "the proposal changed code outside the
// editable regions (line 12: "#include <evil.h>" where the task's kernel has "#include <cmath>")".
Status check_regions_only(std::string_view original, std::string_view candidate);

// The kernel a proposal amounts to: `bodies` spliced into `original` when there are any (`code` must
// then be empty), else the whole file `code`, checked against `original`. Errors are the reasons above.
Result<std::string> accept_proposal(std::string_view original, std::string_view code,
                                    const std::vector<std::string>& bodies);

}  // namespace kiln::task
