// kiln-confine-probe: runs a program (kiln-cuda-init-probe by default) in the sandbox under each way of
// confining it, one after another, and prints what the program said: which part of the confinement a
// runtime cannot live with on this host.
//   kiln-confine-probe [PROGRAM [ARG...]]
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/core/files.h"
#include "kiln/sandbox/sandbox.h"

namespace {

struct Variant {
  const char* name;
  bool confine;
  uint32_t uid;
  bool readonly_root;
  bool bind_libraries;  // LD_LIBRARY_PATH's folders bound under /tmp/kiln/lib<i>
};

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const fs::path self = fs::read_symlink("/proc/self/exe");
  std::vector<std::string> program;
  for (int i = 1; i < argc; ++i) program.push_back(argv[i]);
  if (program.empty()) program.push_back((self.parent_path() / "kiln-cuda-init-probe").string());
  const std::string lib_path = std::getenv("LD_LIBRARY_PATH") ? std::getenv("LD_LIBRARY_PATH") : "";
  const Variant variants[] = {{"plain (no namespace but pid/net)", false, 0, false, false},
                              {"read-only root (the older option)", false, 0, true, false},
                              {"confined, as this user", true, 0, false, false},
                              {"confined, as uid 99000", true, 99000, false, false},
                              {"confined, libraries bound elsewhere", true, 99000, false, true}};
  int failures = 0;
  for (const Variant& v : variants) {
    kiln::TempDir scratch("kiln-confine-probe");
    ::chmod(scratch.path().c_str(), 0777);
    kiln::sandbox::SandboxOptions o;
    o.argv = program;
    o.working_dir = scratch.path();
    o.env = {"PATH=/usr/bin:/bin", "HOME=" + scratch.path(), "LD_LIBRARY_PATH=" + lib_path};
    for (const char* keep : {"CUDA_VISIBLE_DEVICES"})
      if (const char* value = std::getenv(keep)) o.env.push_back(std::string(keep) + "=" + value);
    o.timeout_s = 60;
    o.readonly_root = v.readonly_root;
    if (v.confine) {
      kiln::sandbox::Confinement c;
      c.uid = c.gid = v.uid;
      const fs::path exe = fs::path(program[0]);
      c.binds.push_back({exe.parent_path().string(), "/tmp/kiln/bin", false});
      o.argv[0] = "/tmp/kiln/bin/" + exe.filename().string();
      if (v.bind_libraries) {
        std::string moved;
        size_t i = 0;
        for (size_t at = 0; at < lib_path.size();) {
          size_t end = lib_path.find(':', at);
          if (end == std::string::npos) end = lib_path.size();
          const std::string dir = lib_path.substr(at, end - at);
          at = end + 1;
          if (dir.empty() || !fs::is_directory(dir)) continue;
          const std::string inside = "/tmp/kiln/lib" + std::to_string(i++);
          c.binds.push_back({dir, inside, false});
          moved += (moved.empty() ? "" : ":") + inside;
        }
        o.env[2] = "LD_LIBRARY_PATH=" + moved;
      }
      o.confine = c;
    }
    auto r = kiln::sandbox::run_sandboxed(o);
    if (!r.is_ok()) {
      std::printf("%-36s error: %s\n", v.name, r.status().message().c_str());
      ++failures;
      continue;
    }
    std::string said = r->stdout_text + r->stderr_text;
    while (!said.empty() && said.back() == '\n') said.pop_back();
    std::printf("%-36s %s: %s [fs %s, user %s]\n", v.name, r->describe(o.timeout_s).c_str(), said.c_str(),
                r->filesystem_isolation.c_str(), r->user_isolation.c_str());
    if (!r->succeeded()) ++failures;
  }
  return failures == 0 ? 0 : 1;
}
