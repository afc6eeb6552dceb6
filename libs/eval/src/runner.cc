#include "kiln/eval/runner.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "baselines.h"
#include "kiln/eval/detail/protocol.h"
#include "kiln/eval/host.h"
#include "kiln/sandbox/sandbox.h"
#include "torch_runner_script.h"

namespace kiln::eval {
namespace {

constexpr int kMaxTensors = kRunnerMaxTensors;
constexpr int kMaxScalars = 32;
constexpr size_t kScalarNameBytes = 64;
constexpr size_t kTensorAlignment = 4096;  // every tensor starts on a page, for every contestant alike
constexpr size_t kErrorBytes = 512;

enum RunnerState : uint32_t { kStarting = 0, kReady = 1, kLoadFailed = 2, kSetupFailed = 3 };
// The evaluator's side of the device handshake: whether the blob is there to attach.
enum BlobState : uint32_t { kNoBlob = 0, kBlobPublished = 1 };

// The first page(s) of an arena. The evaluator writes args and the doorbell; the runner writes the rest.
// Nothing the runner writes is trusted beyond "a number to compare": sizes and places of the tensors are
// the evaluator's own.
struct Control {
  alignas(64) std::atomic<uint32_t> seq{0};       // doorbell: the evaluator's call number
  alignas(64) std::atomic<uint32_t> done_seq{0};  // the runner's answer: the call number it finished
  int32_t second_entry = 0;                       // the call runs RunnerKernel::second
  int32_t rc = 0;
  double reported_us = 0;
  alignas(64) std::atomic<uint32_t> state{kStarting};
  alignas(64) std::atomic<uint32_t> blob_state{kNoBlob};
  alignas(64) std::atomic<uint32_t> guard{0};  // a Python runner: 1 once it made itself non-dumpable
  uint32_t blob_bytes = 0;
  unsigned char blob[kRunnerBlobBytes] = {};
  char error[kErrorBytes] = {};
  kiln_args args{};
  kiln_tensor inputs[kMaxTensors]{};
  kiln_tensor outputs[kMaxTensors]{};
  const char* scalar_names[kMaxScalars]{};
  double scalar_values[kMaxScalars]{};
  char scalar_text[kMaxScalars][kScalarNameBytes]{};
};

constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
constexpr size_t kDataOffset = round_up(sizeof(Control), kTensorAlignment);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

Control* control(void* arena) { return static_cast<Control*>(arena); }

// Every runner arena this process maps, whichever Runner::start() mapped it. A runner forked later unmaps
// all of them but its own: the arenas of runners started earlier are live too (a Python reference is
// started once and kept for every timing block, while the candidate's runner is forked afresh for each; a
// tester may run several evaluations at once), and one left mapped would show that contestant's inputs
// and outputs to the candidate. Mapping, unmapping and forking hold the lock, so no fork sees an arena
// that is mapped but not listed.
std::mutex g_arenas_mutex;
std::vector<std::pair<void*, size_t>>& live_arenas() {
  static auto* arenas = new std::vector<std::pair<void*, size_t>>();  // never destroyed: runners may outlive it
  return *arenas;
}

void* map_arena(size_t bytes, int fd) {
  std::lock_guard<std::mutex> lock(g_arenas_mutex);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (fd < 0 ? MAP_ANONYMOUS : 0), fd, 0);
  if (p != MAP_FAILED) live_arenas().emplace_back(p, bytes);
  return p;
}

void unmap_arena(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_arenas_mutex);
  auto& arenas = live_arenas();
  arenas.erase(std::remove_if(arenas.begin(), arenas.end(), [p](const auto& a) { return a.first == p; }), arenas.end());
  ::munmap(p, bytes);
}

// fork() with the lock held and the arenas mapped at that moment in `arenas` (the child never locks).
pid_t fork_listing_arenas(std::vector<std::pair<void*, size_t>>& arenas) {
  g_arenas_mutex.lock();
  arenas = live_arenas();
  const pid_t pid = ::fork();
  if (pid != 0) g_arenas_mutex.unlock();
  return pid;
}

// Futexes on the shared arena (not FUTEX_PRIVATE: two processes).
void futex_wake(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}
void futex_wait(std::atomic<uint32_t>* word, uint32_t value, long timeout_ns) {
  timespec ts{0, timeout_ns};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, value, &ts, nullptr, 0);
}

// The vendor baseline a baseline runner calls (each runner holds one kernel).
const detail::Baseline* g_baseline = nullptr;
int baseline_entry(const kiln_args* args) {
  g_baseline->run(args);
  return 0;
}

[[noreturn]] void load_failed(Control* ctl, const std::string& what, RunnerState state = kLoadFailed) {
  std::strncpy(ctl->error, what.c_str(), kErrorBytes - 1);
  ctl->state.store(state, std::memory_order_release);
  _exit(0);
}

// Waits (in a runner) until the evaluator has published this runner's device blob.
void await_blob(Control* ctl) {
  for (int spins = 0; ctl->blob_state.load(std::memory_order_acquire) != kBlobPublished; ++spins) {
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 1000 ? 50 : 1000));
  }
}

// The runner process: confined, loads its kernel, then answers doorbells until it is killed.
[[noreturn]] void runner_main(Control* ctl, const RunnerKernel& k, const RunnerDevice* device) {
  if (device) {
    // Before any of the kernel's code is here: a failure is the runner's, not the kernel's.
    if (auto st = device->init(); !st.is_ok()) load_failed(ctl, "device: " + st.message(), kSetupFailed);
    await_blob(ctl);
    if (auto st = device->attach(ctl->blob, ctl->blob_bytes); !st.is_ok())
      load_failed(ctl, "device: " + st.message(), kSetupFailed);
  }
  if (auto st = sandbox::confine_current_process(); !st.is_ok()) load_failed(ctl, st.message(), kSetupFailed);
  KernelEntry fn = k.entry;
  if (k.baseline) {
    g_baseline = k.baseline;
    fn = baseline_entry;
  } else if (!k.library.empty()) {
    auto lib = KernelLibrary::open(k.library);
    if (!lib.is_ok()) load_failed(ctl, lib.status().message());
    fn = lib->entry();
    // Loaded for the life of this process: the library object is leaked on purpose.
    new KernelLibrary(std::move(lib).value());
  }
  if (!fn) load_failed(ctl, "no entry point");
  ctl->state.store(kReady, std::memory_order_release);
  uint32_t last = 0;
  for (;;) {
    uint32_t s;
    while ((s = ctl->seq.load(std::memory_order_acquire)) == last) cpu_relax();
    last = s;
    ctl->error[0] = '\0';
    const KernelEntry entry = ctl->second_entry && k.second ? k.second : fn;
    ctl->rc = device ? device->call(entry, &ctl->args, ctl->error, kErrorBytes, &ctl->reported_us) : entry(&ctl->args);
    ctl->done_seq.store(s, std::memory_order_release);
    futex_wake(&ctl->done_seq);  // the evaluator may be asleep on it (a long call)
    // Stop every thread of this process now, from here, rather than when the evaluator gets to it: a
    // thread the kernel left working gets no scheduling delay's worth of time to finish behind the clock.
    ::kill(::getpid(), SIGSTOP);
  }
}

// What a Python runner needs to find its way in the arena, added to its kernel's configuration.
std::string python_config(const PythonKernel& k, const void* arena, size_t arena_bytes) {
  nlohmann::json cfg = nlohmann::json::parse(k.config);
  const Control* c = control(const_cast<void*>(arena));
  const auto at = [c](const void* field) {
    return static_cast<size_t>(static_cast<const char*>(field) - reinterpret_cast<const char*>(c));
  };
  cfg["layout"] = {
      {"seq", at(&c->seq)},
      {"done_seq", at(&c->done_seq)},
      {"rc", at(&c->rc)},
      {"reported_us", at(&c->reported_us)},
      {"state", at(&c->state)},
      {"blob_state", at(&c->blob_state)},
      {"guard", at(&c->guard)},
      {"blob_bytes", at(&c->blob_bytes)},
      {"blob", at(&c->blob)},
      {"error", at(&c->error)},
      {"error_bytes", kErrorBytes},
      {"n_inputs", at(&c->args.n_inputs)},
      {"n_outputs", at(&c->args.n_outputs)},
      {"inputs", at(&c->inputs)},
      {"outputs", at(&c->outputs)},
      {"tensor_size", sizeof(kiln_tensor)},
      {"t_data", offsetof(kiln_tensor, data)},
      {"t_dtype", offsetof(kiln_tensor, dtype)},
      {"t_ndim", offsetof(kiln_tensor, ndim)},
      {"t_shape", offsetof(kiln_tensor, shape)},
      {"max_dims", KILN_MAX_DIMS},
  };
  cfg["arena_bytes"] = arena_bytes;
  cfg["arena_base"] = reinterpret_cast<uintptr_t>(arena);
  cfg["futex_nr"] = SYS_futex;
  return cfg.dump();
}

// `fd` moved to `target`, open across exec.
bool move_fd(int fd, int target) {
  if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;
  return ::dup2(fd, target) == target;
}

// A Python runner: confined like every runner, then the interpreter runs torch_runner.py with the arena as
// fd 3 and the configuration as fd 4 (a sealed memfd), and nothing else open.
[[noreturn]] void python_runner_main(Control* ctl, int arena_fd, const PythonKernel& k, const std::string& config) {
  const int cfd = ::memfd_create("kiln-runner-config", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (cfd < 0) load_failed(ctl, std::string("memfd_create: ") + std::strerror(errno), kSetupFailed);
  for (size_t done = 0; done < config.size();) {
    const ssize_t n = ::write(cfd, config.data() + done, config.size() - done);
    if (n <= 0) load_failed(ctl, "writing the runner's configuration failed", kSetupFailed);
    done += static_cast<size_t>(n);
  }
  ::lseek(cfd, 0, SEEK_SET);
  ::fcntl(cfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  // Out of the way of 3 and 4 first, so that neither lands on the other.
  const int high_arena = ::fcntl(arena_fd, F_DUPFD_CLOEXEC, 64);
  const int high_config = ::fcntl(cfd, F_DUPFD_CLOEXEC, 64);
  if (high_arena < 0 || high_config < 0 || !move_fd(high_arena, 3) || !move_fd(high_config, 4))
    load_failed(ctl, std::string("runner descriptors: ") + std::strerror(errno), kSetupFailed);
  ::syscall(SYS_close_range, 5u, ~0u, 0u);
  if (!k.allow_processes) {
    if (auto st = sandbox::confine_current_process(); !st.is_ok()) load_failed(ctl, st.message(), kSetupFailed);
  }
  const char* argv[] = {k.interpreter.c_str(), "-I", "-c", kTorchRunnerScript, nullptr};
  ::execvp(argv[0], const_cast<char* const*>(argv));
  load_failed(ctl, "cannot run the Python interpreter " + k.interpreter + ": " + std::strerror(errno), kSetupFailed);
}

}  // namespace

Status check_runner_limits(const task::TaskSpec& spec) {
  if (spec.inputs.size() > static_cast<size_t>(kMaxTensors) || spec.outputs.size() > static_cast<size_t>(kMaxTensors))
    return invalid_argument("a task may have at most " + std::to_string(kMaxTensors) + " inputs and outputs each");
  if (spec.scalars.size() > static_cast<size_t>(kMaxScalars))
    return invalid_argument("a task may have at most " + std::to_string(kMaxScalars) + " scalars");
  for (const auto& [name, value] : spec.scalars) {
    (void)value;
    if (name.size() >= kScalarNameBytes)
      return invalid_argument("scalar name '" + name + "' is longer than " + std::to_string(kScalarNameBytes - 1));
  }
  return Status::ok();
}

Result<size_t> arena_bytes_for(const task::TaskSpec& spec) {
  KILN_RETURN_IF_ERROR(check_runner_limits(spec));
  KILN_ASSIGN_OR_RETURN(const size_t most, largest_case_bytes(spec, kTensorAlignment));
  return kDataOffset + kPlacementSlack + most;
}

Result<Runner::Runners> Runner::start(const std::vector<RunnerKernel>& kernels, size_t arena_bytes,
                                      const std::vector<std::pair<void*, size_t>>& wipe, const RunnerDevice* device,
                                      const std::function<Status(Runners&)>& after_fork) {
  Runners runners;
  for (const auto& k : kernels) {
    auto r = std::unique_ptr<Runner>(new Runner());
    r->name_ = k.name;
    r->on_device_ = device != nullptr;
    r->arena_bytes_ = std::max(arena_bytes, kDataOffset);
    r->python_ = k.python != nullptr;
    // An anonymous shared mapping: shared with the runner forked below, with no file anyone can open. A
    // Python runner maps it again after exec: a memfd, close-on-exec here, that only that runner gets.
    int fd = -1;
    if (r->python_) {
      fd = ::memfd_create("kiln-arena", MFD_CLOEXEC);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(r->arena_bytes_)) != 0) {
        if (fd >= 0) ::close(fd);
        return resource_exhausted("runner arena of " + std::to_string(r->arena_bytes_) +
                                  " bytes: " + std::strerror(errno));
      }
      r->arena_fd_ = fd;
    }
    void* p = map_arena(r->arena_bytes_, fd);
    if (p == MAP_FAILED)
      return resource_exhausted("runner arena of " + std::to_string(r->arena_bytes_) +
                                " bytes: " + std::strerror(errno));
    r->arena_ = p;
    new (p) Control();
    runners.push_back(std::move(r));
  }
  const pid_t parent = ::getpid();
  std::vector<std::pair<void*, size_t>> arenas;
  std::vector<size_t> order;
  for (size_t i = 0; i < runners.size(); ++i)
    if (runners[i]->python_) order.push_back(i);
  for (size_t i = 0; i < runners.size(); ++i)
    if (!runners[i]->python_) order.push_back(i);
  for (size_t i : order) {
    const std::string config =
        kernels[i].python ? python_config(*kernels[i].python, runners[i]->arena_, runners[i]->arena_bytes_) : "";
    const pid_t pid = fork_listing_arenas(arenas);
    if (pid < 0) return unavailable(std::string("fork (runner): ") + std::strerror(errno));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(1);
      // Only its own arena: every other contestant's tensors (of any start) are out of reach.
      for (const auto& [arena, bytes] : arenas)
        if (arena != runners[i]->arena_) ::munmap(arena, bytes);
      for (const auto& [ptr, n] : wipe) explicit_bzero(ptr, n);
      if (kernels[i].python)
        python_runner_main(control(runners[i]->arena_), runners[i]->arena_fd_, *kernels[i].python, config);
      ::syscall(SYS_close_range, 3u, ~0u, 0u);
      runner_main(control(runners[i]->arena_), kernels[i], device);
    }
    runners[i]->pid_ = pid;
    if (runners[i]->python_) {
      ::close(std::exchange(runners[i]->arena_fd_, -1));
      runners[i]->await_guard();
    }
    runners[i]->has_second_ = kernels[i].second != nullptr;
    runners[i]->has_cpu_clock_ = ::clock_getcpuclockid(pid, &runners[i]->cpu_clock_) == 0;
  }
  if (after_fork) KILN_RETURN_IF_ERROR(after_fork(runners));
  // Every runner loaded (or failed to load) its kernel; then each is stopped until its first call.
  for (auto& r : runners) {
    Control* ctl = control(r->arena_);
    for (int spins = 0;; ++spins) {
      uint32_t state = ctl->state.load(std::memory_order_acquire);
      if (state == kReady) break;
      if (state == kLoadFailed || state == kSetupFailed) {
        std::string what(ctl->error, strnlen(ctl->error, kErrorBytes));
        ::kill(r->pid_, SIGKILL);
        ::waitpid(r->pid_, nullptr, 0);
        r->pid_ = -1;
        r->dead_ = true;
        r->death_ = {what, state == kLoadFailed};
        break;
      }
      if (auto st = r->check_alive(); !st.is_ok()) {
        r->death_ = {r->death_.what + " while loading it", true};
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 100 ? 50 : 1000));
    }
    if (!r->dead_) {
      auto st = r->freeze();
      (void)st;  // a runner that died here reports it on its first call
    }
  }
  return runners;
}

void Runner::await_guard() {
  Control* ctl = control(arena_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ctl->guard.load(std::memory_order_acquire) == 0 && ctl->state.load(std::memory_order_acquire) == kStarting) {
    if (!check_alive().is_ok()) return;  // start() reports the death
    if (std::chrono::steady_clock::now() > deadline) {
      std::strncpy(ctl->error, "the Python runner did not start within 30 s", kErrorBytes - 1);
      ctl->state.store(kSetupFailed, std::memory_order_release);
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Runner::~Runner() {
  if (arena_fd_ >= 0) ::close(arena_fd_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (arena_) unmap_arena(arena_, arena_bytes_);
}

Status Runner::died(int wait_status) {
  dead_ = true;
  pid_ = -1;
  if (WIFSIGNALED(wait_status)) {
    death_.what = sandbox::signal_description(WTERMSIG(wait_status));
  } else {
    death_.what = "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  }
  return unavailable(name_ + " runner: " + death_.what);
}

Status Runner::check_alive() {
  if (dead_) return unavailable(name_ + " runner: " + death_.what);
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_ && (WIFEXITED(status) || WIFSIGNALED(status))) return died(status);
  return Status::ok();
}

Status Runner::publish(const void* blob, size_t bytes) {
  if (bytes > kRunnerBlobBytes) return invalid_argument("runner blob of " + std::to_string(bytes) + " bytes");
  Control* ctl = control(arena_);
  if (bytes > 0) std::memcpy(ctl->blob, blob, bytes);
  ctl->blob_bytes = static_cast<uint32_t>(bytes);
  ctl->blob_state.store(kBlobPublished, std::memory_order_release);
  return Status::ok();
}

std::string Runner::device_error() const {
  const Control* ctl = control(arena_);
  return std::string(ctl->error, strnlen(ctl->error, kErrorBytes));
}

double Runner::reported_us() const { return control(arena_)->reported_us; }

Status Runner::stage(const kiln_args& args, bool second_entry) {
  if (dead_) return unavailable(name_ + " runner: " + death_.what);
  if (second_entry && !has_second_) return internal_error(name_ + " runner: no second entry to call");
  if (args.n_inputs > kMaxTensors || args.n_outputs > kMaxTensors || args.n_scalars > kMaxScalars)
    return invalid_argument("too many tensors or scalars for a runner");
  Control* ctl = control(arena_);
  ctl->second_entry = second_entry ? 1 : 0;
  auto* base = static_cast<char*>(arena_);
  size_t offset = kDataOffset + std::min(placement_, kPlacementSlack) / 64 * 64;
  // Into the arena; on a device the tensors are in the device arena already and their descriptors name
  // them by offset, so only the descriptors are staged.
  auto place = [&](const kiln_tensor& t, std::vector<Slot>& slots, kiln_tensor& staged) -> Status {
    staged = t;
    if (on_device_) {
      slots.push_back({t.data, 0, 0});
      return Status::ok();
    }
    const size_t bytes = tensor_bytes(t);
    if (offset + bytes > arena_bytes_) return resource_exhausted("tensors exceed the runner arena");
    std::memcpy(base + offset, t.data, bytes);
    slots.push_back({t.data, offset, bytes});
    staged.data = base + offset;
    offset = offset + round_up(bytes, kTensorAlignment);
    return Status::ok();
  };
  in_slots_.clear();
  out_slots_.clear();
  for (int32_t i = 0; i < args.n_inputs; ++i) KILN_RETURN_IF_ERROR(place(args.inputs[i], in_slots_, ctl->inputs[i]));
  for (int32_t i = 0; i < args.n_outputs; ++i)
    KILN_RETURN_IF_ERROR(place(args.outputs[i], out_slots_, ctl->outputs[i]));
  for (int32_t i = 0; i < args.n_scalars; ++i) {
    std::strncpy(ctl->scalar_text[i], args.scalar_names[i], kScalarNameBytes - 1);
    ctl->scalar_text[i][kScalarNameBytes - 1] = '\0';
    ctl->scalar_names[i] = ctl->scalar_text[i];
    ctl->scalar_values[i] = args.scalar_values[i];
  }
  ctl->args = kiln_args{ctl->inputs,       args.n_inputs,      ctl->outputs,   args.n_outputs,
                        ctl->scalar_names, ctl->scalar_values, args.n_scalars, nullptr};
  return Status::ok();
}

bool Runner::evict_staged() const {
  if (on_device_) return false;
  const auto* base = static_cast<const char*>(arena_);
  for (const auto* slots : {&in_slots_, &out_slots_}) {
    for (const Slot& s : *slots) {
      if (!evict_from_caches(base + s.offset, s.bytes)) return false;
    }
  }
  return true;
}

Result<int> Runner::invoke(double* elapsed_us) {
  if (dead_) return unavailable(name_ + " runner: " + death_.what);
  Control* ctl = control(arena_);
  const uint32_t want = ++seq_;
  // The doorbell rings while the runner is stopped and the clock starts as it is continued: from here to
  // the stop, everything the runner's threads do is on the clock (wall time to the answer, CPU time after).
  ctl->seq.store(want, std::memory_order_release);
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(pid_, SIGCONT);
  stopped_ = false;
  // Spin for short calls (the answer is seen at once); then sleep on the answer, so that a kernel's own
  // threads have every core: a spinning evaluator would take one from a multi-threaded kernel and not
  // from a single-threaded reference. The wake-up costs a few microseconds, against a call that has
  // already taken kSpinUs.
  constexpr double kSpinUs = 50;
  for (uint64_t spins = 1;; ++spins) {
    uint32_t done = ctl->done_seq.load(std::memory_order_acquire);
    if (done == want) break;
    if (spins % 64 != 0) {
      cpu_relax();
      continue;
    }
    const double waited_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (waited_us > kSpinUs) futex_wait(&ctl->done_seq, done, 1'000'000);  // at most 1 ms between checks
    // Notice a runner that died, or that stopped: after answering (its own stop; the answer is visible
    // by then, and freeze() must not wait for a second report), or late after its previous call
    // (continued again).
    if (waited_us > kSpinUs || spins % 8192 == 0) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG | WUNTRACED);
      if (r == pid_ && (WIFEXITED(status) || WIFSIGNALED(status))) return died(status);
      if (r == pid_ && WIFSTOPPED(status)) {
        if (ctl->done_seq.load(std::memory_order_acquire) == want) {
          stopped_ = true;
          break;
        }
        ::kill(pid_, SIGCONT);
      }
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  cpu_at_answer_us_ = cpu_now_us();
  after_return_cpu_us_ = 0;
  if (elapsed_us) *elapsed_us = std::chrono::duration<double, std::micro>(t1 - t0).count();
  return static_cast<int>(ctl->rc);
}

double Runner::cpu_now_us() const {
  timespec ts{};
  if (!has_cpu_clock_ || ::clock_gettime(cpu_clock_, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

Status Runner::freeze() {
  if (dead_) return unavailable(name_ + " runner: " + death_.what);
  if (stopped_) return Status::ok();  // seen stopped already (invoke() consumed the report)
  // The runner stops itself right after answering. One that does not (its loop patched by the kernel) is
  // stopped from here after kSelfStopWait, and everything it ran until then is charged to the call.
  constexpr auto kSelfStopWait = std::chrono::milliseconds(100);
  const auto deadline = std::chrono::steady_clock::now() + kSelfStopWait;
  bool sent = seq_ == 0;  // before the first call: nothing to wait for
  if (sent) ::kill(pid_, SIGSTOP);
  for (uint64_t polls = 0;; ++polls) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WUNTRACED | (sent ? 0 : WNOHANG));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return internal_error(name_ + " runner: waitpid: " + std::strerror(errno));
    if (r == pid_ && WIFSTOPPED(status)) break;
    if (r == pid_ && (WIFEXITED(status) || WIFSIGNALED(status))) return died(status);
    if (!sent && std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid_, SIGSTOP);
      sent = true;
    } else if (!sent && polls > 64) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  stopped_ = true;
  after_return_cpu_us_ = std::max(0.0, cpu_now_us() - cpu_at_answer_us_);
  return Status::ok();
}

void Runner::unstage(kiln_args& args) {
  Control* ctl = control(arena_);
  auto* base = static_cast<char*>(arena_);
  // Data back where the evaluator keeps it, and the descriptors as the kernel left them (pointing back at
  // the evaluator's buffers where the kernel did not change them), so the usual checks see everything.
  auto restore = [&](const std::vector<Slot>& slots, const kiln_tensor* staged, kiln_tensor* live) {
    for (size_t i = 0; i < slots.size(); ++i) {
      kiln_tensor d = staged[i];
      if (on_device_) {  // the data stayed on the device; the descriptor must still name the same offset
        d.data = d.data == slots[i].original ? slots[i].original : nullptr;
        live[i] = d;
        continue;
      }
      std::memcpy(slots[i].original, base + slots[i].offset, slots[i].bytes);
      d.data = d.data == base + slots[i].offset ? slots[i].original : nullptr;
      live[i] = d;
    }
  };
  restore(in_slots_, ctl->inputs, const_cast<kiln_tensor*>(args.inputs));
  restore(out_slots_, ctl->outputs, args.outputs);
}

Result<int> Runner::call(kiln_args& args) {
  KILN_RETURN_IF_ERROR(stage(args));
  auto rc = invoke(nullptr);
  if (!rc.is_ok()) return rc;
  KILN_RETURN_IF_ERROR(freeze());
  unstage(args);
  return rc;
}

size_t tensor_bytes(const kiln_tensor& t) {
  return task::dtype_bytes(static_cast<task::DType>(t.dtype)) * tensor_elements(t);
}

size_t tensor_elements(const kiln_tensor& t) {
  size_t n = 1;
  for (int32_t d = 0; d < t.ndim && d < KILN_MAX_DIMS; ++d) n *= static_cast<size_t>(std::max<int64_t>(t.shape[d], 0));
  return n;
}

}  // namespace kiln::eval
