// The evaluation child (kiln-eval, or kiln-eval-cuda), one run of it: the scratch folder it works in (the
// task package, both libraries, a fresh report key), its command line, the sandbox it runs in, and the
// signed report it leaves.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "confined_runs.h"
#include "kiln/core/files.h"
#include "kiln/core/status.h"
#include "kiln/cuda/nvml.h"
#include "kiln/proto/payloads.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/tester/confinement.h"
#include "kiln/tester/options.h"
#include "kiln/tester/slots.h"

namespace kiln::tester {

// The report of the measured run, in the scratch folder.
inline constexpr const char* kResultFile = "result.msgpack";

// What one evaluation's scratch folder holds: the task package's files and both shared objects.
struct ScratchFiles {
  const proto::FileMap* task_files = nullptr;
  const std::string* kernel_so = nullptr;
  const std::string* reference_so = nullptr;
};

// A fresh scratch folder with the task package, both libraries and a fresh report key.
struct Scratch {
  TempDir dir{"kiln-test"};
  std::string key;
};

class EvalChild {
 public:
  // Everything referred to outlives this (the Evaluator's own members).
  EvalChild(const TesterOptions& options, const ConfinementPolicy& policy, const ConfinedRuns& confinement,
            const Slots& slots, const std::string& device_lock, const cuda::GpuIdentity& gpu)
      : options_(options),
        policy_(policy),
        confinement_(confinement),
        slots_(slots),
        device_lock_(device_lock),
        gpu_(gpu) {}

  // The evaluation child's command line; it writes its report to `result_file` in the scratch directory.
  // `screen_below` > 0: the evaluator may stop timing a case once its interval cannot reach it (never for a
  // confirmation).
  std::vector<std::string> argv(const char* result_file, double screen_below = 0) const;
  // The sandbox every run of the evaluation child gets (scratch, environment, limits, confinement).
  // `slot`: the evaluation slot the child runs in (its cores, with several slots), or -1.
  sandbox::SandboxOptions sandbox(const std::string& scratch, std::vector<std::string> argv, double timeout_s,
                                  int slot = -1) const;
  // A fresh scratch folder for `files`, handed to slot `slot`'s child.
  Result<Scratch> make_scratch(const ScratchFiles& files, int slot) const;

  const TesterOptions& options() const { return options_; }
  // The device lock file the children share (slots > 1), else empty.
  const std::string& device_lock() const { return device_lock_; }
  bool confined() const { return confinement_.confined(); }

 private:
  const TesterOptions& options_;
  const ConfinementPolicy& policy_;
  const ConfinedRuns& confinement_;
  const Slots& slots_;
  const std::string& device_lock_;
  const cuda::GpuIdentity& gpu_;
};

// The report the child wrote to `dir`/`file` and signed with `key`; the error says what was wrong with it.
Result<proto::TestReport> read_signed_report(const std::string& dir, const char* file, const std::string& key);
// Files the child wrote are read without following links: a candidate could leave a link to a file only
// the tester may read where its report should be.
Result<std::string> read_child_file(const std::string& path, size_t max_bytes = 64u << 20);
// The end of `text` within `max_bytes`: when a child dies, its last lines say where.
std::string tail(const std::string& text, size_t max_bytes);
// A number on the child's command line, in full ("%.17g").
std::string number(double v);
// A number as people read it in metadata ("0.005", "15").
std::string short_number(double v);
// Adds a line to a report's log, on a line of its own.
void append_log_line(proto::TestReport& report, const std::string& line);

}  // namespace kiln::tester
