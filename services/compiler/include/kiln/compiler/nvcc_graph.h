// nvcc's steps for one CUDA build, run as a graph instead of one after another.
//
// nvcc runs nine tools in a row: host preprocessing, cudafe++ (the host front end), device preprocessing,
// cicc, ptxas, fatbinary, the host compile, a device link and the final link. Most of them do not need
// each other: the host front end does not need the device side at all, and the host compile needs only the
// stub cicc writes, not the machine code (the fat binary is included as data). The graph:
//
//   host preprocessing -> cudafe++ ---------------+
//   device preprocessing -> cicc -+---------------+-> host compile -+-> link
//                                 +-> ptxas -> fatbinary -> object -+
//
// The steps are nvcc's own commands, read from `nvcc -dryrun -keep -keep-dir DIR` for the build's exact
// flags, with three changes: the module id that cudafe++ would write for cicc is written before both run
// (so neither waits for the other), the fat binary is linked in as its own object instead of being
// compiled into the host object, and the device link is left out (a whole-program build, no -rdc, has
// nothing to link; nvcc's device-link object then only registers an empty module). Anything in the
// dry run that is not the expected shape makes parse_nvcc_dryrun fail, and the compiler runs nvcc itself.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::compiler {

struct NvccPlan {
  // Variables nvcc sets for its tools ("CICC_PATH", "PATH", ...), in its order.
  std::vector<std::pair<std::string, std::string>> env;
  // The commands, shell syntax exactly as nvcc printed them but for the changes above.
  std::string host_preprocess, front_end, device_preprocess, cicc, ptxas, fatbinary, host_compile, link;
  std::string host_compiler;   // the host compile's program ("gcc"), which also assembles the fat binary
  std::string keep_dir;        // where the intermediate files go, relative to the build directory
  std::string module_id_file;  // read by cudafe++ and cicc
  std::string fatbin_include;  // the file cicc's stub includes for the fat binary (relative to keep_dir)
  std::string fatbin_file;     // the fat binary fatbinary creates
  std::string fatbin_object;   // the object the link takes in place of nvcc's device-link object
};

// The plan in the text `nvcc <flags> -o OUT SRC -dryrun -keep -keep-dir KEEP_DIR` prints (its stderr).
// Fails, naming the step, when the steps are not one target's whole-program build.
Result<NvccPlan> parse_nvcc_dryrun(std::string_view text, const std::string& keep_dir);

// `plan` with every occurrence of `from` replaced by `to` in its commands (a dry run made elsewhere, or
// with a marker where a build's -D flags go, used for another build).
NvccPlan rewrite_plan(const NvccPlan& plan, std::string_view from, std::string_view to);

// One build's graph: the files to write into the build directory before running it (the module id, the
// fat binary's include and its assembly), and the /bin/sh script that runs the steps. Each step's output
// goes to KEEP_DIR/<step>.out and .err (step names: nvcc_graph_steps()); the script exits 0 when the link
// succeeded, 1 when a step failed (the other branch is waited for first).
struct NvccGraphFiles {
  std::vector<std::pair<std::string, std::string>> files;  // relative path, content
  std::string script;
};
NvccGraphFiles nvcc_graph(const NvccPlan& plan, std::string_view module_id);

// The step names in nvcc's own order, the order their output is reported in.
const std::vector<std::string>& nvcc_graph_steps();

// A module id for a build ("_<8 hex>_<n>_<name>_<8 hex>", nvcc's shape): `digest` is hex and at least 16
// characters (the build's cache key), `source_name` the file built.
std::string nvcc_module_id(std::string_view digest, std::string_view source_name);

}  // namespace kiln::compiler
