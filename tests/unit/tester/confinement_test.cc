// The tester confines every candidate (DESIGN §5, docs/threat-model.md): a correct CPU candidate whose
// code attacks Kiln's own files and processes finds every attack refused and still gets its normal
// verdict, as root (the sandbox's uid) and as an ordinary user (a user namespace of that user's ids). Where
// the confinement cannot be set up the tester refuses to evaluate and says why, unless
// tester.allow_unconfined, which then says so in every verdict.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "kiln/config/config.h"
#include "kiln/core/files.h"
#include "kiln/proto/codec.h"
#include "kiln/sandbox/sandbox.h"
#include "kiln/task/task.h"
#include "kiln/tester/confinement.h"
#include "kiln/tester/handler.h"
#include "kiln/testing/hostile_probe.h"
#include "kiln/testing/kiln_install.h"
#include "kiln/testing/loopback_listener.h"
#include "kiln/testing/as_user.h"
#include "kiln/testing/no_namespaces.h"
#include "kiln/testing/test_status.h"

using kiln::tester::TesterOptions;
using kiln::tester::TestHandler;
namespace fs = std::filesystem;
using status = kiln::proto::TestStatus;

using kiln::testing::Install;

namespace {

using kiln::testing::as_user;

constexpr uint32_t kNobody = 65534;

// rmsnorm's program 0 with the probe run at the start of every call (once per process).
struct Candidate {
  kiln::TempDir dir{"kiln-confine-build"};
  kiln::proto::FileMap files;
  std::string kernel_so, reference_so;

  explicit Candidate(const kiln::testing::ProbeTargets& t) {
    auto loaded = kiln::task::load_package(KILN_SOURCE_DIR "/configs/tasks/rmsnorm");
    REQUIRE(loaded.is_ok());
    files = *loaded;
    const std::string& kernel = files.at("kernel.cpp").data;
    auto bodies = kiln::task::region_bodies(kernel);
    REQUIRE(bodies.is_ok());
    auto hostile = kiln::task::replace_region(kernel, "  kiln_hostile_probe();\n" + bodies->at(0));
    REQUIRE(hostile.is_ok());
    kernel_so = compile("hostile", kiln::testing::probe_source(t) + *hostile);
    reference_so = compile("reference", files.at("reference.cpp").data);
  }

  std::string compile(const std::string& name, const std::string& code) {
    const std::string base = dir.path() + "/" + name;
    REQUIRE(kiln::write_file_atomic(base + ".cpp", code).is_ok());
    const std::string cmd = "g++ -O2 -fopenmp -shared -fPIC -std=c++17 -I" KILN_SOURCE_DIR "/libs/core/include -o " +
                            base + ".so " + base + ".cpp";
    REQUIRE(std::system(cmd.c_str()) == 0);
    auto so = kiln::read_file(base + ".so");
    REQUIRE(so.is_ok());
    return *so;
  }

  kiln::proto::TestRequest request() const {
    kiln::proto::TestRequest req;
    req.cand.campaign_id = "c1";
    req.cand.program_id = "c1/p1";
    req.purpose = kiln::proto::Purpose::kEval;
    req.files = files;
    req.kernel_so.data = kernel_so;
    req.reference_so.data = reference_so;
    req.build.ok = true;
    return req;
  }
};

// Evaluates the hostile candidate through a tester with `options`; "" when its verdict is ok, every
// attack was refused and nothing changed, else what went wrong. Catch's macros are not used, so this runs
// in a forked child too.
std::string evaluate_hostile(const Install& install, const Candidate& candidate, const TesterOptions& options,
                             std::string* log_out = nullptr) {
  auto handler = TestHandler::create(options);
  if (!handler.is_ok()) return "create: " + handler.status().to_string();
  if (!(*handler)->confinement().is_ok()) return "not confined: " + (*handler)->confinement().message();
  auto report = (*handler)->evaluate(candidate.request());
  if (!report.is_ok()) return "evaluate: " + report.status().to_string();
  if (log_out) *log_out = report->log;
  if (report->status != status::kOk)
    return "verdict " + std::string(kiln::proto::word_of(report->status)) + ": " + report->message + "\n" + report->log;
  const auto seen = kiln::testing::probe_results(report->process.stderr_text + report->log);
  for (const auto& name : kiln::testing::probe_names()) {
    auto it = seen.find(name);
    if (it == seen.end()) return "the probe did not say " + name + ":\n" + report->log;
    if (it->second.rfind("refused", 0) != 0) return name + " " + it->second;
  }
  const auto user = report->metadata.find("isolation_user");
  if (user == report->metadata.end() || user->second == "none") return "no user isolation in the metadata";
  return install.unchanged();
}

}  // namespace

TEST_CASE("a CPU candidate that attacks Kiln's files and processes finds every attack refused", "[tester][confine]") {
  Install install;
  kiln::testing::LoopbackListener broker;
  ::setenv("KILN_CONFINE_MARKER", "kiln-tester-environ-marker", 1);
  Candidate candidate(install.targets(broker.port));
  SECTION("as this process's user") {
    std::string log;
    CHECK(evaluate_hostile(install, candidate, install.options(), &log) == "");
    INFO(log);
    // The probe ran in a runner with the same rights as the kernel it belongs to.
    CHECK(log.find("KILN-PROBE create_outside refused") != std::string::npos);
  }
  if (::geteuid() == 0) {
    SECTION("as an ordinary user") {
      CHECK(as_user(kNobody, [&] { return evaluate_hostile(install, candidate, install.options()); }) == "");
    }
  }
  ::unsetenv("KILN_CONFINE_MARKER");
}

TEST_CASE("a tester that cannot confine refuses to evaluate and says why, unless told to run unconfined",
          "[tester][confine]") {
  Install install;
  kiln::testing::LoopbackListener broker;
  Candidate candidate(install.targets(broker.port));
  // In a forked child whose seccomp profile refuses new namespaces, as a container's default one does.
  const std::string refused = as_user(::geteuid(), [&]() -> std::string {
    if (!kiln::testing::refuse_namespaces()) return "could not install the filter";
    auto handler = TestHandler::create(install.options());
    if (!handler.is_ok()) return "create: " + handler.status().to_string();
    if ((*handler)->confinement().is_ok()) return "confinement claimed to work";
    if ((*handler)->capabilities().confinement.rfind("refuses to evaluate: ", 0) != 0)
      return "capabilities say " + (*handler)->capabilities().confinement;
    kiln::proto::Job job;
    job.job_id = "c1/p1:test";
    job.payload.data = kiln::proto::encode(candidate.request());
    auto out = (*handler)->handle(job);
    if (out.outcome != kiln::messaging::Outcome::kRetry) return "not given back: " + out.error;
    if (!out.next.empty()) return "a verdict went to the scorer";
    if (out.error.find("cannot confine the candidate here") == std::string::npos ||
        out.error.find("PID namespace here: Operation not permitted") == std::string::npos)
      return "reason: " + out.error;
    if (fs::exists(install.outside + "/planted")) return "the candidate ran";
    // Told it may, the tester runs the candidate unconfined, and the verdict's log says so first.
    TesterOptions loose = install.options();
    loose.allow_unconfined = true;
    auto unconfined = TestHandler::create(loose);
    if (!unconfined.is_ok()) return "create: " + unconfined.status().to_string();
    auto report = (*unconfined)->evaluate(candidate.request());
    if (!report.is_ok()) return "unconfined evaluate: " + report.status().to_string();
    if (report->log.rfind("WARNING: this candidate ran UNCONFINED", 0) != 0) return "no warning: " + report->log;
    if ((*unconfined)->capabilities().confinement.rfind("UNCONFINED: ", 0) != 0) return "capabilities";
    return "";
  });
  CHECK(refused == "");
}

TEST_CASE("the paths hidden from a candidate are every file Kiln keeps, whatever the config names them",
          "[tester][confine]") {
  kiln::config::KilnConfig cfg;
  cfg.source = "/etc/kiln/kiln.yaml";
  cfg.broker.db_path = "broker.db";                   // relative: under the state directory
  cfg.scorer.db_path = "/srv/kiln/archive.db";        // absolute: as it is
  cfg.compiler.cache_dir = "cache/../compile-cache";  // normalised
  cfg.broker.external_secret_key_file = "/etc/kiln/broker.key";
  cfg.promoter.registry_dir = "/srv/registry";
  cfg.tester.gpu_claim_dir = "/run/kiln/gpu-claims";
  const auto hidden = kiln::tester::kiln_private_paths(cfg, "/var/lib/kiln", "/home/kiln");
  auto has = [&](const std::string& p) { return std::find(hidden.begin(), hidden.end(), p) != hidden.end(); };
  for (const char* p :
       {"/var/lib/kiln", "/var/lib/kiln/broker.db", "/srv/kiln/archive.db", "/var/lib/kiln/compile-cache",
        "/etc/kiln/broker.key", "/srv/registry", "/run/kiln/gpu-claims", "/etc/kiln/kiln.yaml", "/home/kiln"}) {
    INFO(p);
    CHECK(has(p));
  }
  // Nothing is hidden twice, and never the root itself.
  CHECK(std::set<std::string>(hidden.begin(), hidden.end()).size() == hidden.size());
  CHECK_FALSE(has("/"));
}

TEST_CASE(
    "library folders the child would find replaced are bound in, and an evaluator that cannot start fails the check",
    "[tester][confine]") {
  using kiln::tester::covered_in_child;
  CHECK(covered_in_child("/tmp/kiln-libs/lib", {}));
  CHECK(covered_in_child("/dev/shm/x", {}));
  CHECK(covered_in_child("/srv/kiln/state/lib", {"/srv/kiln/state"}));
  CHECK_FALSE(covered_in_child("/usr/lib/x86_64-linux-gnu", {"/srv/kiln/state"}));
  CHECK_FALSE(covered_in_child("/tmpfoo/lib", {}));  // a prefix of the name is not a parent folder

  // The dynamic loader's refusal (exit code 127, its message on stderr) is not a started evaluator.
  kiln::TempDir dir("kiln-confine-loader");
  const std::string eval = dir.path() + "/kiln-eval";
  REQUIRE(
      kiln::write_file_atomic(eval,
                              "#!/bin/sh\necho 'kiln-eval: error while loading shared libraries: libkiln-x.so' >&2\n"
                              "exit 127\n")
          .is_ok());
  ::chmod(eval.c_str(), 0755);
  ::chmod(dir.path().c_str(), 0755);
  kiln::tester::ConfinementPolicy policy;
  policy.eval_binary = eval;
  const kiln::Status st = kiln::tester::check_confinement(policy);
  INFO(st.message());
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.message().find("exit code 127") != std::string::npos);
  CHECK(st.message().find("libkiln-x.so") != std::string::npos);
}
