// A runner's second entry (RunnerKernel::second): a call staged for it runs that function of the
// evaluator's process instead of the kernel, in the same runner process; a runner without one refuses.
#include <catch2/catch.hpp>

#include "kiln/eval/runner.h"

using kiln::eval::Runner;
using kiln::eval::RunnerKernel;

namespace {

int kernel_entry(const kiln_args*) { return 7; }
int probe_entry(const kiln_args*) { return 9; }

int call_once(Runner& r, bool second) {
  kiln_args args{};
  REQUIRE(r.stage(args, second).is_ok());
  auto rc = r.invoke(nullptr);
  REQUIRE(rc.is_ok());
  REQUIRE(r.freeze().is_ok());
  r.unstage(args);
  return *rc;
}

}  // namespace

TEST_CASE("runner: a call staged for the second entry runs it in the same process", "[eval][runner]") {
  std::vector<RunnerKernel> kernels = {{"reference", kernel_entry, "", nullptr, probe_entry},
                                       {"candidate", kernel_entry, "", nullptr, nullptr}};
  auto started = Runner::start(kernels, 1 << 20, {});
  REQUIRE(started.is_ok());
  Runner& with = *(*started)[0];
  Runner& without = *(*started)[1];
  CHECK(call_once(with, false) == 7);
  CHECK(call_once(with, true) == 9);
  CHECK(call_once(with, false) == 7);
  const int pid = with.pid();
  CHECK(call_once(with, true) == 9);
  CHECK(with.pid() == pid);
  kiln_args args{};
  const auto refused = without.stage(args, true);
  CHECK_FALSE(refused.is_ok());
  CHECK(refused.message().find("no second entry") != std::string::npos);
  CHECK(call_once(without, false) == 7);
}
