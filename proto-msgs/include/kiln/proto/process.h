// One run of a process (the seeds' ProcessResult), as BuildInfo and TestReport carry it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace kiln::proto {

// One run of a process as the seeds' ProcessResult (v4): what BuildInfo and TestReport carry of the
// compiler or evaluation child they ran. `returncode` follows the subprocess convention the seeds' schema
// uses: the exit status, or -N when signal N ended the process (a run killed at its timeout reads -9 and
// its `message` says so). Each stream is capped by its writer, within the cap of the log it comes with
// (BuildInfo.log, TestReport.log), and marks what it dropped. There is no output_data: what a run produced
// travels in the message that carries this (the TestReport's verdict, the built shared object).
//
// Absent (an older writer, or no process ran: a build served from an old cache entry) it reads as
// returncode 0 with no output, so the verdict is BuildInfo.ok or TestReport.status, never this.
struct ProcessResult {
  int64_t returncode = 0;
  std::string stdout_text;  // "stdout"
  std::string stderr_text;  // "stderr"
  std::string message;      // one line: "timed out after 120 s", "killed by SIGSEGV"
  template <class V>
  void fields(V& v) {
    v("returncode", returncode);
    v("stdout", stdout_text);
    v("stderr", stderr_text);
    v("message", message);
  }
};

// The output as one text, as the seeds' combine_output: the message line first (when asked for and not
// empty), then stdout, then stderr, each ending with a newline.
std::string combined_output(const ProcessResult& result, bool include_message = true);

// How a writer shares `max_bytes` between the two streams of a ProcessResult: each keeps all it has when
// both fit; otherwise a stream shorter than half the budget keeps all of it and the other gets the rest,
// else half each. {stdout budget, stderr budget}.
std::pair<size_t, size_t> stream_budgets(size_t stdout_bytes, size_t stderr_bytes, size_t max_bytes);

// Several runs as one, as the seeds' merge, for a step made of several processes (keyed by what each
// was, e.g. "reference" and "kernel"): returncode is 0 when every run's is, else the first non-zero one in
// key order; each stream is the runs' streams in key order, each under a "=== <key> ===" header line
// (runs with nothing on that stream are left out); the message is "<key>: <message>" lines. The result is
// as large as its parts together: merge what the writers already capped.
ProcessResult merge(const std::map<std::string, ProcessResult>& results);

}  // namespace kiln::proto
