// GPU claims (libs/cuda/gpu_claim.h): testers sharing a folder serve distinct GPUs, and a dead tester's GPU
// is free again. No GPU needed: the claims are over GPU names.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln/core/files.h"
#include "kiln/cuda/gpu_claim.h"

using kiln::StatusCode;
using kiln::cuda::GpuClaim;

namespace {
const std::vector<std::string> kGpus = {"GPU-aaaa-0001", "GPU-bbbb-0002"};
}

TEST_CASE("testers sharing a claim folder take distinct GPUs, then none is left", "[cuda][claim]") {
  kiln::TempDir dir("kiln-claim");
  auto first = GpuClaim::first_free(dir.path() + "/claims", kGpus);
  REQUIRE(first.is_ok());
  CHECK(first->index() == 0);
  CHECK(first->key() == "GPU-aaaa-0001");
  auto second = GpuClaim::first_free(dir.path() + "/claims", kGpus);
  REQUIRE(second.is_ok());
  CHECK(second->index() == 1);
  auto third = GpuClaim::first_free(dir.path() + "/claims", kGpus);
  REQUIRE_FALSE(third.is_ok());
  CHECK(third.status().code() == StatusCode::kResourceExhausted);
  CHECK(third.status().message().find("every GPU (2) is claimed") != std::string::npos);

  // Releasing one (the tester exits) frees exactly that GPU.
  first = GpuClaim{};
  auto again = GpuClaim::first_free(dir.path() + "/claims", kGpus);
  REQUIRE(again.is_ok());
  CHECK(again->index() == 0);
}

TEST_CASE("a GPU claimed by a process that is killed is free again", "[cuda][claim]") {
  kiln::TempDir dir("kiln-claim");
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto claim = GpuClaim::first_free(dir.path(), kGpus);
    char c = claim.is_ok() && claim->index() == 0 ? 'y' : 'n';
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    ::pause();  // holds the claim until killed
    ::_exit(0);
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  REQUIRE(c == 'y');
  auto while_held = GpuClaim::first_free(dir.path(), kGpus);
  REQUIRE(while_held.is_ok());
  CHECK(while_held->index() == 1);  // the other process holds GPU 0
  while_held = GpuClaim{};

  REQUIRE(::kill(child, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  ::close(ready[0]);
  ::close(ready[1]);
  auto after = GpuClaim::first_free(dir.path(), kGpus);
  REQUIRE(after.is_ok());
  CHECK(after->index() == 0);
}

TEST_CASE("a GPU name that is not a plain name is refused before any file is made", "[cuda][claim]") {
  kiln::TempDir dir("kiln-claim");
  auto bad = GpuClaim::first_free(dir.path(), {"GPU-1", "../../etc/passwd"});
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  auto none = GpuClaim::first_free(dir.path(), {});
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().code() == StatusCode::kNotFound);
}
