// run_protocol() against a device that runs its contestants as plain functions on the host: the protocol's
// rules (correctness calls, inputs that move while timed, timed outputs compared, the check after timing,
// blocks, whose fault a failure is) without processes or a clock, so every verdict here is exact.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/core/files.h"
#include "kiln/eval/device.h"
#include "kiln/eval/device_lock.h"
#include "kiln/testing/test_status.h"

using kiln::Result;
using kiln::Status;
using kiln::eval::Device;
using kiln::eval::EvalOptions;
using kiln::eval::PerturbBlock;
using kiln::eval::TensorSet;
using kiln::task::DType;
using kiln::task::InitKind;
using kiln::task::TaskSpec;
using status = kiln::proto::TestStatus;

namespace {

TaskSpec double_task() {
  TaskSpec spec;
  spec.name = "double";
  spec.op = "double";
  spec.backend = kiln::proto::Backend::kCpu;
  spec.dtype = "fp32";
  spec.inputs = {{"x", DType::kF32, {"N"}, InitKind::kNormal, 0, 1}};
  spec.outputs = {{"y", DType::kF32, {"N"}, InitKind::kZeros, 0, 0}};
  spec.correctness_cases = {{{"N", 7}}, {{"N", 300}}};
  spec.seeds = 2;
  spec.rtol = 1e-6;
  spec.atol = 1e-6;
  spec.benchmark_cases = {{{"N", 4096}}};
  return spec;
}

// y = 2x, the reference and the honest candidate.
int twice(TensorSet& t) {
  for (size_t i = 0; i < t.inputs[0].elements(); ++i) t.outputs[0].set(i, 2 * t.inputs[0].get(i));
  return 0;
}

// A contestant: what a call does to its tensors, and the time it "takes": `us`, give or take up to
// `spread` of it (a fixed pseudo-random sequence over its calls), plus `wake_us` when the call before it on
// the device was another contestant's, plus `group1_us` in the blocks of placement group 1.
struct Kernel {
  std::function<int(TensorSet&)> run = twice;
  double us = 10;
  double spread = 0;
  double wake_us = 0;
  double group1_us = 0;
};

uint64_t digest(const std::vector<kiln::eval::HostTensor>& tensors) {
  uint64_t h = 14695981039346656037ULL;  // FNV-1a
  for (const auto& t : tensors) {
    const auto* p = static_cast<const unsigned char*>(t.data());
    for (size_t i = 0; i < t.bytes(); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  }
  return h;
}

class FakeDevice final : public Device {
 public:
  FakeDevice(Kernel candidate, Kernel reference) : kernels_{std::move(candidate), std::move(reference)} {
    names_ = {"candidate", "reference"};
    slots_.resize(2);
  }
  const char* log_prefix() const override { return "fake"; }
  std::string timing_method() const override { return "fake_clock"; }
  std::string candidate_load_failure() const override { return load_failure; }
  Status check_started() const override { return Status::ok(); }
  int candidate_pid() const override { return 4242; }

  Status load(size_t who, const TensorSet& t) override {
    slots_[who] = t;
    return Status::ok();
  }
  Status read(size_t who, TensorSet& into, bool inputs_too) override {
    if (who == 0 && !inputs_too) ++output_reads;  // only the timed comparison reads the candidate's outputs alone
    if (who == 0 && inputs_too) ++input_reads;
    if (inputs_too) into.inputs = slots_[who].inputs;
    into.outputs = slots_[who].outputs;
    return Status::ok();
  }
  Result<Call> call(size_t who, CallKind kind) override {
    ++calls[{who, kind}];
    if (on_call) on_call(kind);
    if (on_who) on_who(who, kind);
    Call c;
    if (who == 0 && crash_at_timed_call > 0 && kind == CallKind::kTimed && calls[{0, kind}] == crash_at_timed_call) {
      c.death = "SIGSEGV";
      return c;
    }
    if (who == 0) candidate_inputs.emplace_back(kind, digest(slots_[0].inputs));
    const Kernel& k = kernels_[who];
    c.rc = k.run(slots_[who]);
    const uint64_t draw = (static_cast<uint64_t>(calls[{who, kind}]) * 0x9E3779B97F4A7C15ULL) >> 11;
    const double unit = static_cast<double>(draw) / static_cast<double>(uint64_t{1} << 53);  // [0, 1)
    c.sample_us = k.us * (1 + k.spread * (2 * unit - 1));
    if (last_ != who && last_ != kNobody) c.sample_us += k.wake_us;
    if (group_ == 1) c.sample_us += k.group1_us;
    last_ = who;
    return c;
  }
  // With `compares`, a device that compares outputs where they are (as a GPU does): compare() itself on
  // its own buffers, no line listed.
  Result<bool> compare_outputs(size_t got, size_t expected, double rtol, double atol,
                               std::vector<kiln::eval::Comparison>& per_output) override {
    if (!compares) return false;
    ++device_compares;
    per_output.assign(slots_[got].outputs.size(), {});
    for (size_t i = 0; i < per_output.size(); ++i) {
      kiln::eval::compare(slots_[got].outputs[i], slots_[expected].outputs[i], rtol, atol, "y", "", 0, per_output[i]);
    }
    return true;
  }
  Status check_case(const TensorSet&) override { return Status::ok(); }
  Status begin_timing(const TaskSpec& spec, const TensorSet& shapes, uint64_t first_seed,
                      uint64_t donor_seed) override {
    timing_.draw(spec, shapes, first_seed, donor_seed);
    return Status::ok();
  }
  Status load_block(size_t who, const TensorSet& /*shapes*/) override { return load(who, timing_.first); }
  Result<Block> begin_block(uint64_t block) override {
    blocks.push_back(block);
    group_ = static_cast<int>(block % groups);
    Block b;
    if (block == die_at_block) b.candidate_death = "SIGKILL";
    return b;
  }
  int placement_group(size_t /*who*/) const override { return group_; }
  Status perturb(size_t who, const std::vector<PerturbBlock>& bs) override {
    if (who == kOwnCopy) {
      ++perturbs;
      timing_.perturb(timing_.first, bs);
    } else {
      timing_.perturb(slots_[who], bs);
    }
    return Status::ok();
  }
  Status end_timing(std::vector<std::vector<double>>& samples, std::string& note) override {
    ended = true;
    rounds = samples[0].size();
    note = "fake note";
    return Status::ok();
  }
  Status load_donor(size_t who, const TensorSet& shapes, int variant) override {
    return load(who, timing_.donor_set(shapes, variant));
  }
  Result<bool> inputs_are_donor(size_t who) override {
    for (size_t i = 0; i < slots_[who].inputs.size(); ++i) {
      if (!slots_[who].inputs[i].same_bytes(timing_.donor.inputs[i])) return false;
    }
    return true;
  }
  Status read_donor(TensorSet& into) override {
    into.inputs = timing_.donor.inputs;
    return Status::ok();
  }

  std::string load_failure;
  bool compares = false;
  int device_compares = 0;
  int output_reads = 0;
  int input_reads = 0;
  std::function<void(CallKind)> on_call;
  std::function<void(size_t, CallKind)> on_who;  // before every call: whose, and which kind
  int crash_at_timed_call = 0;
  uint64_t die_at_block = ~uint64_t{0};
  std::map<std::pair<size_t, CallKind>, int> calls;
  std::vector<uint64_t> blocks;
  int perturbs = 0;
  uint64_t groups = 1;  // blocks take turns in this many placement groups
  // Every call of the candidate, and a digest of the inputs it ran on.
  std::vector<std::pair<CallKind, uint64_t>> candidate_inputs;
  size_t rounds = 0;
  bool ended = false;

 private:
  static constexpr size_t kNobody = ~size_t{0};
  int group_ = 0;
  std::vector<Kernel> kernels_;
  std::vector<TensorSet> slots_;
  size_t last_ = kNobody;  // whose call ran last
  kiln::eval::HostTimingSets timing_;
};

EvalOptions fast() {
  EvalOptions o;
  o.timing.min_time_s = 0.002;
  o.timing.max_time_s = 0.2;
  o.timing.min_samples = 12;
  o.timing.warmup_iters = 2;
  return o;
}

kiln::proto::TestReport run(FakeDevice& d, const EvalOptions& o = fast()) {
  auto r = kiln::eval::run_protocol(double_task(), d, o);
  REQUIRE(r.is_ok());
  return *r;
}

}  // namespace

TEST_CASE("driver: an honest candidate is correct and its speedup is the ratio of the clocks", "[eval][driver]") {
  FakeDevice d({twice, 5}, {twice, 20});
  const auto r = run(d);
  CHECK(r.status == status::kOk);
  CHECK(r.performance.method == "fake_clock");
  REQUIRE(r.performance.cases.size() == 1);
  CHECK(r.performance.cases[0].speedup == Approx(4.0));
  CHECK(r.performance.cases[0].speedup_lo == Approx(4.0));
  // Correctness: two candidate calls and one reference call per case and seed, and each once more after
  // timing; the warm-up before block 0 and, 4x shorter than the reference, one settling call in every
  // round but the first whose candidate follows the reference; a perturbation before every timed round.
  CHECK(d.calls[{0, Device::CallKind::kCheck}] == 2 * 2 * 2 + 1);
  CHECK(d.calls[{1, Device::CallKind::kCheck}] == 2 * 2 + 1);
  CHECK(d.calls[{0, Device::CallKind::kWarmUp}] == 2 + (static_cast<int>(d.rounds) + 1) / 2 - 1);
  CHECK(d.calls[{1, Device::CallKind::kWarmUp}] == 2);
  CHECK(d.perturbs == static_cast<int>(d.rounds));
  CHECK(d.calls[{0, Device::CallKind::kTimed}] == static_cast<int>(d.rounds));
  CHECK(d.ended);
  REQUIRE_FALSE(d.blocks.empty());
  CHECK(d.blocks.front() == 0);
}

TEST_CASE("driver: a candidate that replays what it computed once fails on the inputs that move", "[eval][driver]") {
  TensorSet memo;
  bool have = false;
  int calls = 0;
  Kernel replay{[&](TensorSet& t) {
                  // Honest through correctness, then (from the first timed call) the remembered result.
                  if (++calls > 9 && have && memo.outputs[0].elements() == t.outputs[0].elements()) {
                    t.outputs[0].copy_from(memo.outputs[0]);
                    return 0;
                  }
                  twice(t);
                  memo = t;
                  have = true;
                  return 0;
                },
                1};
  FakeDevice d(replay, {twice, 20});
  // Compared on the host, or on a device that compares where the outputs are: it finds the mismatch, and
  // the host then reads them back to list it.
  d.compares = GENERATE(false, true);
  const auto r = run(d);
  CHECK(r.status == status::kMismatch);
  CHECK(r.message.find("timed round") != std::string::npos);
  CHECK(r.message.find("y[") != std::string::npos);
  CHECK(d.output_reads > 0);
  CHECK((d.device_compares > 0) == d.compares);
}

TEST_CASE("driver: a device that compares outputs where they are spares the timed rounds reading them back",
          "[eval][driver]") {
  FakeDevice d({twice, 5}, {twice, 20});
  d.compares = true;
  const auto r = run(d);
  CHECK(r.status == status::kOk);
  CHECK(d.device_compares > 1);
  CHECK(d.output_reads == 0);
  // What the device found counts as the host's would: no error here, so the largest error is 0.
  CHECK(r.correctness.max_abs_error == 0);

  // Timed outputs that differ within tolerance (and exact ones everywhere else): the largest error the
  // device found reaches the report.
  Device::CallKind kind = Device::CallKind::kCheck;
  Kernel close{[&kind](TensorSet& t) {
                 twice(t);
                 if (kind == Device::CallKind::kTimed) t.outputs[0].set(0, t.outputs[0].get(0) + 5e-7);
                 return 0;
               },
               5};
  FakeDevice near(close, {twice, 20});
  near.compares = true;
  near.on_call = [&kind](Device::CallKind k) { kind = k; };
  const auto r2 = run(near);
  CHECK(r2.status == status::kOk);
  CHECK(near.output_reads == 0);
  CHECK(r2.correctness.max_abs_error > 3e-7);
}

TEST_CASE("driver: a candidate that writes its input is caught", "[eval][driver]") {
  Kernel scribble{[](TensorSet& t) {
                    twice(t);
                    t.inputs[0].set(0, 123.0);
                    return 0;
                  },
                  1};
  FakeDevice d(scribble, {twice, 20});
  const auto r = run(d);
  CHECK(r.status == status::kInputModified);
  CHECK(r.message.find("input 'x' was modified") != std::string::npos);
}

TEST_CASE("driver: the check after timing compares where the device keeps the tensors and reads back what differs",
          "[eval][driver]") {
  // Honest: the check after timing reads nothing back (correctness reads the candidate's inputs after
  // each of its calls: two per case and seed).
  FakeDevice d({twice, 5}, {twice, 20});
  d.compares = true;
  CHECK(run(d).status == status::kOk);
  CHECK(d.input_reads == 2 * 2 * 2);
  CHECK(d.output_reads == 0);

  // A kernel that writes its input only once timing is over is caught there, on the donor's inputs.
  Device::CallKind kind = Device::CallKind::kCheck;
  bool timed = false;
  Kernel late{[&](TensorSet& t) {
                twice(t);
                if (kind == Device::CallKind::kTimed) timed = true;
                if (timed && kind == Device::CallKind::kCheck) t.inputs[0].set(1, -7.0);
                return 0;
              },
              5};
  FakeDevice w(late, {twice, 20});
  w.compares = true;
  w.on_call = [&kind](Device::CallKind k) { kind = k; };
  const auto r = run(w);
  CHECK(r.status == status::kInputModified);
  CHECK(r.message.find("input 'x' was modified (N=4096, after timing)") != std::string::npos);
  CHECK(w.input_reads == 2 * 2 * 2 + 1);
}

TEST_CASE("driver: a failing reference is the evaluator's error, never the candidate's verdict", "[eval][driver]") {
  FakeDevice d({twice, 5}, {[](TensorSet&) { return 3; }, 20});
  auto r = kiln::eval::run_protocol(double_task(), d, fast());
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("the reference failed: kiln_entry returned 3") != std::string::npos);
}

TEST_CASE("driver: a candidate that dies while timed or starting a block is crashed, with where", "[eval][driver]") {
  SECTION("mid-round") {
    FakeDevice d({twice, 5}, {twice, 20});
    d.crash_at_timed_call = 3;
    const auto r = run(d);
    CHECK(r.status == status::kCrashed);
    CHECK(r.message == "crashed: SIGSEGV (N=4096, timing)");
    CHECK(r.performance.cases.empty());
  }
  SECTION("a fresh process of a later block") {
    FakeDevice d({twice, 5}, {twice, 20});
    d.die_at_block = 1;
    EvalOptions o = fast();
    o.timing.min_time_s = 0.05;  // long enough for a second block
    const auto r = run(d, o);
    CHECK(r.status == status::kCrashed);
    CHECK(r.message == "crashed: SIGKILL (N=4096, timing block 1)");
  }
}

TEST_CASE("driver: a candidate that cannot load is load_failed, and a profile run calls it once", "[eval][driver]") {
  {
    FakeDevice d({twice, 5}, {twice, 20});
    d.load_failure = "undefined symbol: foo";
    const auto r = run(d);
    CHECK(r.status == status::kLoadFailed);
    CHECK(r.message == "cannot load the kernel: undefined symbol: foo");
  }
  FakeDevice d({twice, 5}, {twice, 20});
  EvalOptions o = fast();
  o.profile_run = true;
  const auto r = run(d, o);
  CHECK(r.status == status::kOk);
  CHECK(r.metadata.at("profile_pid") == "4242");
  CHECK(r.metadata.at("profile_case") == "N=4096");
  CHECK(d.calls[{0, Device::CallKind::kCheck}] == 1);
  CHECK(d.calls[{1, Device::CallKind::kCheck}] == 0);
}

TEST_CASE("driver: screening stops timing a case whose interval cannot reach the bar", "[eval][driver]") {
  EvalOptions o = fast();
  o.timing.min_time_s = 0.5;  // blocks of 50 ms: screening looks when the fifth would start
  o.timing.max_time_s = 5;
  o.timing.screen_below = 1.1;
  FakeDevice slow({twice, 20}, {twice, 10});
  const auto r = run(slow, o);
  CHECK(r.status == status::kOk);
  CHECK(r.performance.measured);
  REQUIRE(r.performance.cases.size() == 1);
  const auto& t = r.performance.cases[0];
  CHECK(t.stop_reason == "screened");
  CHECK(t.speedup == Approx(0.5));
  CHECK(t.speedup_hi < 1.1);
  CHECK(r.message.find("screened out on N=4096: speedup 0.5x [0.5x, 0.5x] cannot reach 1.1x") != std::string::npos);
  // Four blocks were enough; the check after timing still ran.
  CHECK(slow.blocks.size() == 4);
  CHECK(slow.calls[{0, Device::CallKind::kCheck}] == 2 * 2 * 2 + 1);

  // One that can reach it is timed in full, and so is everything when screening is off.
  FakeDevice fast_one({twice, 5}, {twice, 10});
  const auto full = run(fast_one, o);
  REQUIRE(full.performance.cases.size() == 1);
  CHECK(full.performance.cases[0].stop_reason == "noise");
  o.timing.screen_below = 0;
  FakeDevice unscreened({twice, 20}, {twice, 10});
  const auto off = run(unscreened, o);
  REQUIRE(off.performance.cases.size() == 1);
  CHECK(off.performance.cases[0].stop_reason == "noise");
}

TEST_CASE("driver: the precision stop ends a case once the speedup's interval is narrow enough", "[eval][driver]") {
  // Samples 5 % either way: a CV of 3 %, which the noise rule (0.5 %) never accepts, but a median ratio
  // known to a few per cent after a few dozen rounds. A round takes at least 2 ms.
  EvalOptions o = fast();
  o.timing.min_time_s = 0.05;
  o.timing.max_time_s = 5;
  o.timing.precision = 0.05;
  auto slow_rounds = [](Device::CallKind kind) {
    if (kind == Device::CallKind::kTimed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  FakeDevice d({twice, 10, 0.05}, {twice, 20, 0.05});
  d.on_call = slow_rounds;
  const auto r = run(d, o);
  CHECK(r.status == status::kOk);
  REQUIRE(r.performance.cases.size() == 1);
  const auto& t = r.performance.cases[0];
  CHECK(t.stop_reason == "precise");
  CHECK(t.speedup == Approx(2.0).epsilon(0.05));
  CHECK(t.speedup_hi - t.speedup_lo <= 2 * 0.05 * t.speedup * 1.5);  // the final bootstrap resamples more
  CHECK(t.timing_s < o.timing.max_time_s);
  CHECK(d.blocks.size() >= 6);  // it looks from the sixth block on
  // The check after timing still ran.
  CHECK(d.calls[{0, Device::CallKind::kCheck}] == 2 * 2 * 2 + 1);

  // Off, the same contestants run until the noise rule gives up.
  o.timing.precision = 0;
  o.timing.max_time_s = 0.3;
  FakeDevice off({twice, 10, 0.05}, {twice, 20, 0.05});
  off.on_call = slow_rounds;
  const auto r_off = run(off, o);
  REQUIRE(r_off.performance.cases.size() == 1);
  const std::string reason = r_off.performance.cases[0].stop_reason;
  CHECK((reason == "stalled" || reason == "max_time"));
}

TEST_CASE("driver: a case is timed holding the device's lock alone, every other call shares it", "[eval][driver]") {
  kiln::TempDir dir("kiln-lock-test");
  const std::string path = dir.path() + "/device.lock";
  EvalOptions o = fast();
  o.device_lock = path;
  FakeDevice d({twice, 10}, {twice, 20});
  // What another evaluation slot of the device could take at each call, asked without waiting.
  const int other = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(other >= 0);
  auto could = [&](int op) {
    const bool got = ::flock(other, op | LOCK_NB) == 0;
    if (got) ::flock(other, LOCK_UN);
    return got;
  };
  std::map<Device::CallKind, int> shared_ok, exclusive_ok, seen;
  d.on_call = [&](Device::CallKind kind) {
    ++seen[kind];
    shared_ok[kind] += could(LOCK_SH);
    exclusive_ok[kind] += could(LOCK_EX);
  };
  const auto r = run(d, o);
  ::close(other);
  CHECK(r.status == status::kOk);
  REQUIRE(seen[Device::CallKind::kTimed] > 0);
  // Timed and warm-up calls: held exclusively, so another slot could take nothing.
  CHECK(shared_ok[Device::CallKind::kTimed] == 0);
  CHECK(exclusive_ok[Device::CallKind::kTimed] == 0);
  CHECK(shared_ok[Device::CallKind::kWarmUp] == 0);
  // Correctness calls and the check after timing: shared, so another slot's correctness could run too,
  // but no other slot's timing.
  CHECK(shared_ok[Device::CallKind::kCheck] == seen[Device::CallKind::kCheck]);
  CHECK(exclusive_ok[Device::CallKind::kCheck] == 0);
  // Released at the end: another slot can take it.
  const int after = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CHECK(::flock(after, LOCK_EX | LOCK_NB) == 0);
  ::close(after);

  // No lock file: no lock, and the same verdict.
  FakeDevice free_device({twice, 10}, {twice, 20});
  CHECK(run(free_device).status == status::kOk);
}

TEST_CASE("device lock: holds nest and give back what was held before", "[eval][driver]") {
  kiln::TempDir dir("kiln-lock-test");
  auto lock = kiln::eval::DeviceLock::open(dir.path() + "/l");
  REQUIRE(lock.is_ok());
  using Mode = kiln::eval::DeviceLock::Mode;
  {
    auto ex = lock->hold(Mode::kExclusive);
    REQUIRE(ex.is_ok());
    CHECK(lock->held() == Mode::kExclusive);
    {
      auto sh = lock->hold(Mode::kShared);  // inside an exclusive hold: nothing more to take
      REQUIRE(sh.is_ok());
      CHECK(lock->held() == Mode::kExclusive);
    }
    CHECK(lock->held() == Mode::kExclusive);
  }
  CHECK(lock->held() == Mode::kNone);
  kiln::eval::DeviceLock none;
  auto nothing = none.hold(Mode::kExclusive);
  REQUIRE(nothing.is_ok());
  CHECK_FALSE(none.active());
  CHECK(none.held() == Mode::kNone);
  CHECK(kiln::eval::DeviceLock::open("/nonexistent-dir/x.lock").status().code() == kiln::StatusCode::kUnavailable);
}

TEST_CASE("device lock: a slot waiting to time a case is not overtaken by later shared holds", "[eval][driver]") {
  kiln::TempDir dir("kiln-lock-test");
  const std::string path = dir.path() + "/device.lock";
  using kiln::eval::DeviceLock;
  using Mode = DeviceLock::Mode;
  auto a = DeviceLock::open(path), b = DeviceLock::open(path), c = DeviceLock::open(path);
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  REQUIRE(c.is_ok());
  auto a_shared = std::make_unique<DeviceLock::Hold>(std::move(a->hold(Mode::kShared)).value());
  std::mutex mu;
  std::vector<std::string> order;
  auto got = [&](const std::string& who) {
    std::lock_guard<std::mutex> l(mu);
    order.push_back(who);
  };
  // b asks to time a case while a holds the lock shared: it waits, holding the turnstile.
  std::thread timing([&] {
    auto h = b->hold(Mode::kExclusive);
    REQUIRE(h.is_ok());
    got("b");
  });
  const int turn = ::open((path + ".turn").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(turn >= 0);
  auto turnstile_taken = [&] {
    if (::flock(turn, LOCK_EX | LOCK_NB) != 0) return true;
    ::flock(turn, LOCK_UN);
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!turnstile_taken() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(turnstile_taken());
  // c asks for a shared hold after b: a shares with it, but c waits its turn behind b.
  std::thread correctness([&] {
    auto h = c->hold(Mode::kShared);
    REQUIRE(h.is_ok());
    got("c");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard<std::mutex> l(mu);
    CHECK(order.empty());
  }
  a_shared.reset();  // a lets go: b times its case, then c goes on
  timing.join();
  correctness.join();
  ::close(turn);
  CHECK(order == std::vector<std::string>{"b", "c"});
  // Each accounts for its waits and holds.
  CHECK(b->waited_s(Mode::kExclusive) >= 0.04);
  CHECK(a->held_s(Mode::kShared) >= 0.04);
  CHECK(a->held_s(Mode::kExclusive) == 0);
  CHECK(b->held() == Mode::kNone);
}

TEST_CASE("device lock: shared holders that both ask to time a case let go first and never deadlock",
          "[eval][driver]") {
  kiln::TempDir dir("kiln-lock-test");
  const std::string path = dir.path() + "/device.lock";
  using kiln::eval::DeviceLock;
  using Mode = DeviceLock::Mode;
  auto a = DeviceLock::open(path), b = DeviceLock::open(path);
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  auto a_shared = std::make_unique<DeviceLock::Hold>(std::move(a->hold(Mode::kShared)).value());
  auto b_shared = std::make_unique<DeviceLock::Hold>(std::move(b->hold(Mode::kShared)).value());
  // Both slots hold the lock shared and both ask to time a case, in either order; each gets it, and then
  // lets go of its shared hold too (were either kept while waiting at the turnstile, neither would ever
  // get it).
  Mode a_during = Mode::kNone, b_during = Mode::kNone;
  std::thread other([&] {
    {
      auto h = b->hold(Mode::kExclusive);
      CHECK(h.is_ok());
      b_during = b->held();
    }
    b_shared.reset();
  });
  {
    auto h = a->hold(Mode::kExclusive);
    CHECK(h.is_ok());
    a_during = a->held();
  }
  CHECK(a->held() == Mode::kShared);
  a_shared.reset();
  other.join();
  CHECK(a_during == Mode::kExclusive);
  CHECK(b_during == Mode::kExclusive);
  CHECK(a->held() == Mode::kNone);
  CHECK(b->held() == Mode::kNone);
}

TEST_CASE("driver: settling times a short candidate in its own wake, not the long reference's", "[eval][driver]") {
  // The candidate takes 5 us, 25 us right after the reference (100 us): the loop alternates the order, so
  // half its timed calls follow the reference and its median lands between the two.
  const Kernel candidate{twice, 5, 0, 20};
  const Kernel reference{twice, 100};
  auto off = fast();
  off.timing.settle_calls = 0;
  FakeDevice plain(candidate, reference);
  const auto unsettled = run(plain, off);
  REQUIRE(unsettled.status == status::kOk);
  CHECK(unsettled.performance.cases[0].speedup < 10);
  CHECK(plain.calls[{0, Device::CallKind::kWarmUp}] == 2);  // the warm-up only

  auto o = fast();
  o.timing.settle_calls = 1;
  FakeDevice settled(candidate, reference);
  const auto r = run(settled, o);
  REQUIRE(r.status == status::kOk);
  CHECK(r.performance.cases[0].speedup == Approx(20.0));  // 100 / 5: only the first round is unsettled
  const int rounds = static_cast<int>(settled.rounds);
  // One settling call in every round but the first whose candidate follows the reference (even rounds).
  CHECK(settled.calls[{0, Device::CallKind::kWarmUp}] == 2 + (rounds + 1) / 2 - 1);
  CHECK(settled.calls[{1, Device::CallKind::kWarmUp}] == 2);  // the long reference never settles
  // Settling calls run on the round before's inputs: a result the candidate kept from one is stale for the
  // timed call after it (where the comparisons catch it), as one kept from an earlier round is.
  const auto& seen = settled.candidate_inputs;
  int settling = 0;
  uint64_t last_timed = 0;
  for (size_t i = 0; i + 1 < seen.size(); ++i) {
    if (seen[i].first == Device::CallKind::kTimed) last_timed = seen[i].second;
    if (seen[i].first != Device::CallKind::kWarmUp || seen[i + 1].first != Device::CallKind::kTimed) continue;
    if (last_timed == 0) continue;  // the warm-up before the first round
    INFO("candidate call " << i);
    CHECK(seen[i].second == last_timed);
    ++settling;
  }
  CHECK(settling == (rounds + 1) / 2 - 1);
}

TEST_CASE("driver: a candidate that replays its settling call's output is caught", "[eval][driver]") {
  // Computes honestly, except that a timed call right after an untimed call of its own hands back what
  // that call produced: right, were the settling call run on the timed call's inputs.
  auto kept = std::make_shared<TensorSet>();
  auto replay = std::make_shared<bool>(false);
  Kernel cheat{[kept, replay](TensorSet& t) {
                 if (*replay && !kept->outputs.empty()) {
                   t.outputs[0].copy_from(kept->outputs[0]);
                 } else {
                   twice(t);
                 }
                 *kept = t;
                 return 0;
               },
               5, 0, 20};
  auto o = fast();
  o.timing.settle_calls = 1;
  FakeDevice device(cheat, Kernel{twice, 100});
  std::pair<size_t, Device::CallKind> before{2, Device::CallKind::kTimed};
  device.on_who = [&](size_t who, Device::CallKind kind) {
    *replay =
        who == 0 && kind == Device::CallKind::kTimed && before.first == 0 && before.second == Device::CallKind::kWarmUp;
    before = {who, kind};
  };
  const auto r = run(device, o);
  INFO(r.message);
  CHECK(r.status == status::kMismatch);
}

TEST_CASE("driver: the interval owns up to a candidate that is slower in one placement group", "[eval][driver]") {
  // 5 us where its tensors sit in group 0, 7 us in group 1 (another arena: other physical memory); the
  // reference 100 us in both. Blocks take turns, so the median is either or between: the interval reaches
  // both 100 / 7 and 100 / 5, as another evaluation, whose blocks drew otherwise, could measure either.
  auto o = fast();
  o.timing.settle_calls = 0;
  FakeDevice one({twice, 5, 0, 0, 2}, {twice, 100});
  const auto single = run(one, o);  // one group: no spread to own up to
  REQUIRE(single.status == status::kOk);
  CHECK(single.performance.cases[0].speedup_lo == Approx(single.performance.cases[0].speedup_hi));

  FakeDevice two({twice, 5, 0, 0, 2}, {twice, 100});
  two.groups = 2;
  const auto r = run(two, o);
  REQUIRE(r.status == status::kOk);
  const auto& c = r.performance.cases[0];
  INFO("speedup " << c.speedup << " [" << c.speedup_lo << ", " << c.speedup_hi << "]");
  CHECK(c.speedup_lo <= 100.0 / 7 + 1e-9);
  CHECK(c.speedup_hi >= 100.0 / 5 - 1e-9);
}
