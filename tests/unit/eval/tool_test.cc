// The evaluation child's command line (kiln/eval/tool.h), run in this process with a stand-in for the
// evaluation itself: whose fault a failed setup is, said in a report the tester can authenticate.
#include "kiln/eval/tool.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "kernels.h"
#include "kiln/core/files.h"
#include "kiln/proto/codec.h"
#include "kiln/testing/test_status.h"

using kiln::eval::testing::build_kernel;
using status = kiln::proto::TestStatus;

namespace {

const char* const kTaskDir = KILN_SOURCE_DIR "/configs/tasks/rmsnorm";

std::string reference_so() {
  return build_kernel("tool_reference",
                      "#include \"kiln/kernel_abi.h\"\n"
                      "extern \"C\" KILN_EXPORT int kiln_entry(const kiln_args*) { return 0; }\n");
}

kiln::eval::EvalTool test_tool() {
  kiln::eval::EvalTool tool;
  tool.name = "kiln-eval-test";
  tool.worker_info = [] { return kiln::proto::WorkerInfo{}; };
  return tool;
}

// A tool whose evaluation answers `evaluated` whatever it is given.
kiln::eval::EvalTool tool_answering(kiln::Result<kiln::proto::TestReport> evaluated) {
  kiln::eval::EvalTool tool = test_tool();
  tool.evaluate = [evaluated](const kiln::task::TaskSpec&, const kiln::eval::Candidate&, const kiln::eval::Candidate&,
                              const kiln::eval::EvalOptions&) { return evaluated; };
  return tool;
}

// kiln-eval's own evaluation: every contestant in a runner of its own.
kiln::eval::EvalTool cpu_tool() {
  kiln::eval::EvalTool tool = test_tool();
  tool.evaluate = [](const kiln::task::TaskSpec& spec, const kiln::eval::Candidate& candidate,
                     const kiln::eval::Candidate& reference, const kiln::eval::EvalOptions& options) {
    return kiln::eval::evaluate(spec, candidate, reference.entry, options);
  };
  return tool;
}

// Runs the tool with a report key and returns its report, after checking that it exited 0 and that the
// report's MAC verifies, as the tester requires.
kiln::proto::TestReport run_tool(const kiln::eval::EvalTool& tool, const std::string& task_dir,
                                 const std::string& kernel, const std::string& reference) {
  kiln::TempDir dir("kiln-tool-test");
  const std::string key(32, 'k');
  const std::string key_path = dir.path() + "/report.key";
  const std::string out = dir.path() + "/result.msgpack";
  REQUIRE(kiln::write_file_atomic(key_path, key).is_ok());
  std::vector<std::string> args = {"kiln-eval-test", "--task", task_dir, "--kernel",     kernel,   "--reference",
                                   reference,        "--out",  out,      "--report-key", key_path, "--no-timing"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  REQUIRE(kiln::eval::run_eval_tool(static_cast<int>(argv.size()), argv.data(), tool) == 0);
  auto bytes = kiln::read_file(out);
  auto mac = kiln::read_file(kiln::eval::report_mac_path(out));
  REQUIRE(bytes.is_ok());
  REQUIRE(mac.is_ok());
  CHECK(kiln::eval::report_authentic(key, *bytes, *mac));
  auto report = kiln::proto::decode<kiln::proto::TestReport>(*bytes);
  REQUIRE(report.is_ok());
  return std::move(report).value();
}

}  // namespace

TEST_CASE("an evaluation that cannot be done here is an evaluator_error, not the candidate's verdict", "[eval]") {
  const std::string reference = reference_so();
  REQUIRE(!reference.empty());
  const auto tool = tool_answering(kiln::internal_error("the reference failed: SIGSEGV (B=1 seed 0)"));

  auto no_task = run_tool(tool, "/nonexistent/task", reference, reference);
  CHECK(no_task.status == status::kEvaluatorError);
  CHECK(no_task.message.rfind("task: ", 0) == 0);

  auto no_reference = run_tool(tool, kTaskDir, reference, "/nonexistent/reference.so");
  CHECK(no_reference.status == status::kEvaluatorError);
  CHECK(no_reference.message.rfind("cannot load the reference: ", 0) == 0);

  auto failed = run_tool(tool, kTaskDir, reference, reference);
  CHECK(failed.status == status::kEvaluatorError);
  CHECK(failed.message == "evaluation: the reference failed: SIGSEGV (B=1 seed 0)");
}

TEST_CASE("a candidate that will not load is still the candidate's load_failed", "[eval]") {
  const std::string reference = reference_so();
  const std::string no_entry = build_kernel("tool_no_entry", "extern \"C\" int not_the_entry() { return 0; }\n");
  REQUIRE(!reference.empty());
  REQUIRE(!no_entry.empty());
  auto report = run_tool(cpu_tool(), kTaskDir, no_entry, reference);
  CHECK(report.status == status::kLoadFailed);
  CHECK(report.message.rfind("cannot load the kernel: ", 0) == 0);
  CHECK(report.message.find("no kiln_entry") != std::string::npos);
}
