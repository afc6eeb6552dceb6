// Runs a piece of a test as another user, in a forked child: the confinement tests try their battery as
// root and as an ordinary user. Test-only.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

namespace kiln::testing {

// Runs `body` in a forked child as `uid` (and gid `uid`; no switch when this process already is `uid`)
// and returns what it reports: empty when every check held, else the first that did not. Catch's macros
// must not be used in `body`: it runs in the child.
inline std::string as_user(uint32_t uid, const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe";
  const pid_t pid = ::fork();
  if (pid < 0) return "fork";
  if (pid == 0) {
    ::close(fds[0]);
    std::string why;
    if (::getuid() != uid && (::setgid(uid) != 0 || ::setuid(uid) != 0))
      why = std::string("setuid: ") + std::strerror(errno);
    else
      why = body();
    (void)!::write(fds[1], why.data(), why.size());
    _exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return out;
}

}  // namespace kiln::testing
