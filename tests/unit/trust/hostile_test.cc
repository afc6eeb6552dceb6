// Hostile kernels through kiln-eval in the sandbox: the evaluation child must turn each into a result,
// and every attack on the tester's machine must fail. A kernel whose attack fails computes the right
// answer, and one whose attack succeeds writes garbage, so the verdict itself says whether the sandbox
// held.

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "harness.h"
#include "kiln/testing/loopback_listener.h"
#include "kiln/testing/skip.h"

using kiln::trust::Harness;
using kiln::trust::kernel_source;
using kiln::trust::Timing;
using kiln::trust::Verdict;
using status = kiln::proto::TestStatus;

namespace {

const std::string kGarbage = "for (int64_t i = 0; i < n; ++i) y[i] = 12345.f;\nreturn 0;\n";

// Correctness only: these kernels attack the machine, not the clock.
Verdict check(Harness& h, const std::string& name, const std::string& body, const std::string& globals = "",
              double timeout_s = 30) {
  Timing no_timing;
  no_timing.measure = false;
  return kiln::trust::run(h, name, body, globals, no_timing, "", timeout_s);
}

}  // namespace

TEST_CASE("a kernel that segfaults, aborts or exits is a result", "[trust][hostile]") {
  Harness h;
  // The candidate runs in a runner process of its own: the evaluator outlives it and says where it died.
  Verdict segfault = check(h, "segfault", "*static_cast<volatile int*>(nullptr) = 1;");
  CHECK(segfault.status == status::kCrashed);
  CHECK(segfault.message == "crashed: SIGSEGV (N=1 seed 0)");
  Verdict aborts = check(h, "aborts", "std::abort();", "#include <cstdlib>");
  CHECK(aborts.status == status::kCrashed);
  CHECK(aborts.message == "crashed: SIGABRT (N=1 seed 0)");
  Verdict exits = check(h, "exits", "std::exit(0);", "#include <cstdlib>");
  CHECK(exits.status == status::kCrashed);
  CHECK(exits.message == "crashed: exited with code 0 (N=1 seed 0)");
}

TEST_CASE("a kernel that loops or sleeps forever is timed out", "[trust][hostile]") {
  Harness h;
  Verdict loops = check(h, "loops", "for (volatile int i = 0;; i = i + 1) {}", "", 1.5);
  CHECK(loops.status == status::kTimedOut);
  CHECK(loops.child.wall_s < 5);
  Verdict sleeps = check(h, "sleeps", "for (;;) pause();", "#include <unistd.h>", 1.5);
  CHECK(sleeps.status == status::kTimedOut);
  CHECK(sleeps.child.wall_s < 5);
}

TEST_CASE("a flood of output is capped and the evaluation goes on", "[trust][hostile]") {
  Harness h;
  Verdict v = check(
      h, "floods",
      "static bool flooded = false;\n"
      "if (!flooded) { flooded = true; std::string line(1 << 20, 'z');\n"
      "  for (int k = 0; k < 64; ++k) { std::fwrite(line.data(), 1, line.size(), stdout); std::fflush(stdout); } }\n" +
          kiln::trust::kHonestBody,
      "#include <cstdio>\n#include <string>");
  CHECK(v.status == status::kOk);
  CHECK(v.child.stdout_text.size() < (64u << 10) + 64);
  CHECK(v.child.stdout_text.find("bytes dropped]") != std::string::npos);
}

TEST_CASE("a kernel cannot start processes (no fork bomb)", "[trust][hostile]") {
  Harness h;
  Verdict v = check(h, "forks",
                    "static bool tried = false;\n"
                    "if (!tried) { tried = true; pid_t pid = fork();\n"
                    "  if (pid == 0) _exit(0);\n"  // a real bomb would be contained too, but not on a shared box
                    "  if (pid > 0) { " +
                        kGarbage + " } }\n" + kiln::trust::kHonestBody,
                    "#include <unistd.h>");
  CHECK(v.status == status::kOk);
}

TEST_CASE("a kernel cannot reach a TCP listener on 127.0.0.1", "[trust][hostile]") {
  kiln::testing::LoopbackListener listener;
  REQUIRE(listener.port > 0);
  Harness h;
  Verdict v = check(h, "connects",
                    "int fd = socket(AF_INET, SOCK_STREAM, 0);\n"
                    "if (fd >= 0) { sockaddr_in addr{}; addr.sin_family = AF_INET; addr.sin_port = htons(" +
                        std::to_string(listener.port) +
                        ");\n"
                        "  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);\n"
                        "  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) { close(fd); " +
                        kGarbage +
                        " }\n"
                        "  close(fd); }\n" +
                        kiln::trust::kHonestBody,
                    "#include <arpa/inet.h>\n#include <netinet/in.h>\n#include <sys/socket.h>\n#include <unistd.h>");
  CHECK(v.status == status::kOk);
}

TEST_CASE("a kernel cannot write outside its scratch directory", "[trust][hostile]") {
  kiln::TempDir outside("kiln-trust-outside");
  const std::string target = outside.path() + "/planted";
  Harness h;
  Verdict v = check(h, "plants",
                    "int fd = open(\"" + target +
                        "\", O_CREAT | O_WRONLY, 0644);\n"
                        "if (fd >= 0) { close(fd); " +
                        kGarbage + " }\n" + kiln::trust::kHonestBody,
                    "#include <fcntl.h>\n#include <unistd.h>");
  if (v.child.filesystem_isolation != "readonly_root") {
    KILN_SKIP("mount namespaces are not permitted here: writes outside the scratch dir are not prevented");
  }
  CHECK(v.status == status::kOk);
  CHECK_FALSE(kiln::read_file(target).is_ok());
}

TEST_CASE("a kernel cannot read the tester's secrets", "[trust][hostile]") {
  ::setenv("OPENAI_API_KEY", "sk-kiln-trust-not-a-real-key", 1);
  // The value of a variable this process started with is in /proc/<this pid>/environ.
  std::ifstream self("/proc/self/environ", std::ios::binary);
  std::string environ((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
  std::string marker = environ.substr(0, environ.find('\0'));
  REQUIRE(marker.size() > 3);
  // It goes into a C string literal below; a marker that would need escaping is simply not searched.
  if (marker.find_first_of("\"\\") != std::string::npos) marker.clear();
  Harness h;
  std::string body =
      "static int leaked = -1;\n"
      "if (leaked < 0) {\n"
      "  leaked = std::getenv(\"OPENAI_API_KEY\") != nullptr;\n";
  if (!marker.empty()) {
    body +=
        "  if (DIR* proc = opendir(\"/proc\")) {\n"
        "    while (dirent* e = readdir(proc)) {\n"
        "      std::ifstream in(std::string(\"/proc/\") + e->d_name + \"/environ\", std::ios::binary);\n"
        "      std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());\n"
        "      if (env.find(\"" +
        marker +
        "\") != std::string::npos && std::string(e->d_name) != \"self\" &&\n"
        "          std::to_string(getpid()) != e->d_name) leaked = 1;\n"
        "    }\n"
        "    closedir(proc);\n"
        "  }\n";
  }
  body += "}\nif (leaked) { " + kGarbage + " }\n" + kiln::trust::kHonestBody;
  Verdict v = check(h, "reads_secrets", body,
                    "#include <dirent.h>\n#include <unistd.h>\n#include <cstdlib>\n#include <fstream>\n"
                    "#include <iterator>\n#include <string>");
  ::unsetenv("OPENAI_API_KEY");
  if (v.child.pid_isolation != "pidns" && geteuid() != 0) {
    // Documented in docs/threat-model.md: without a PID namespace only the capability check guards
    // /proc/<tester>/environ, and a tester without capabilities has nothing to guard it with.
    KILN_SKIP("no PID namespace and no capabilities here: /proc/<tester>/environ is readable, not checked");
  }
  CHECK(v.status == status::kOk);
}
