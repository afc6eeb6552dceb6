// The broker with real sockets on loopback: workers and clients of the messaging library, and raw
// sockets that misbehave.
#include <catch2/catch.hpp>
#include <prometheus/text_serializer.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "kiln/broker/broker.h"
#include "kiln/broker/options.h"
#include "kiln/config/config.h"
#include "kiln/core/files.h"
#include "kiln/core/time.h"
#include "kiln/core/hash.h"
#include "kiln/messaging/blobs.h"
#include "kiln/messaging/client.h"
#include "kiln/messaging/worker.h"
#include "kiln/proto/payloads.h"

using namespace kiln;
using namespace std::chrono_literals;

namespace {

std::string metrics_text(prometheus::Registry& r) { return prometheus::TextSerializer().Serialize(r.Collect()); }

// The value of one series: `label` is "name=value", or empty for a family without labels.
double metric_value(prometheus::Registry& r, const std::string& family_name, const std::string& label = "") {
  for (const auto& family : r.Collect()) {
    if (family.name != family_name) continue;
    for (const auto& m : family.metric) {
      std::string here = m.label.empty() ? "" : m.label[0].name + "=" + m.label[0].value;
      if (here != label) continue;
      return family.type == prometheus::MetricType::Gauge ? m.gauge.value : m.counter.value;
    }
  }
  return -1;
}

// Every series of the registry, by name and labels (not values).
std::set<std::string> series_of(prometheus::Registry& r) {
  std::set<std::string> out;
  for (const auto& family : r.Collect()) {
    for (const auto& m : family.metric) {
      std::string key = family.name;
      for (const auto& l : m.label) key += "|" + l.name + "=" + l.value;
      out.insert(key);
    }
  }
  return out;
}

// A raw DEALER that sends whatever frames it is given and reads what comes back.
struct RawPeer {
  zmq::socket_t socket;
  RawPeer(zmq::context_t& ctx, const std::string& endpoint) : socket(ctx, zmq::socket_type::dealer) {
    socket.set(zmq::sockopt::linger, 0);
    socket.connect(endpoint);
  }
  void send(const std::vector<std::string>& parts) {
    for (size_t i = 0; i < parts.size(); ++i)
      socket.send(zmq::buffer(parts[i]), i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  // The next message with `command` within `timeout_s` (others are skipped), or nothing. Heartbeats go
  // out meanwhile, so a peer that registered as a worker is not dropped while it waits.
  std::optional<messaging::Envelope> wait_for(std::string_view command, double timeout_s = 5) {
    double until = monotonic_s() + timeout_s;
    double next_heartbeat = 0;
    while (monotonic_s() < until) {
      if (monotonic_s() >= next_heartbeat) {
        send({"KILN1", "HEARTBEAT", proto::encode(proto::Heartbeat{})});
        next_heartbeat = monotonic_s() + 0.05;
      }
      auto env = messaging::recv_envelope(socket, false);
      if (!env) {
        std::this_thread::sleep_for(5ms);
        continue;
      }
      if (env->is_ok() && env->value().command == command) return env->value();
    }
    return std::nullopt;
  }
  // The error of the refusing ACK that must come next (a READY or SUBMIT the broker turned down).
  std::string refusal() {
    auto ack = wait_for(proto::cmd::kAck);
    REQUIRE(ack);
    auto decoded = proto::decode<proto::Ack>(ack->body);
    REQUIRE(decoded.is_ok());
    CHECK_FALSE(decoded->accepted);
    return decoded->error;
  }
};

// Valid UTF-8 (what the Prometheus text format requires of label values).
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Routes spdlog to a string for the life of the object.
struct CapturedLog {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  CapturedLog() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous); }
  size_t count(const std::string& needle) {
    spdlog::default_logger()->flush();
    const std::string text = out.str();
    size_t n = 0;
    for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
    return n;
  }
};

struct RunningBroker {
  TempDir dir{"kiln-broker-test"};
  zmq::context_t ctx{1};
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<broker::Broker> broker;
  std::atomic<bool> stop{false};
  std::thread thread;

  explicit RunningBroker(broker::BrokerOptions opt = {}, std::string db = "") {
    opt.bind = "tcp://127.0.0.1:*";
    opt.events_bind.clear();
    opt.db_path = db.empty() ? dir.path() + "/broker.db" : db;
    // Beats every 0.1 s and gives up after 0.5 s, unless the test asked for other numbers.
    if (opt.heartbeat_interval_s == broker::BrokerOptions{}.heartbeat_interval_s) opt.heartbeat_interval_s = 0.1;
    if (opt.heartbeat_liveness == broker::BrokerOptions{}.heartbeat_liveness) opt.heartbeat_liveness = 5;
    if (opt.max_message_bytes == broker::BrokerOptions{}.max_message_bytes) opt.max_message_bytes = 1 << 20;
    auto b = broker::Broker::create(ctx, opt, registry);
    REQUIRE(b.is_ok());
    broker = std::move(b).value();
    thread = std::thread([this] { broker->run(stop); });
  }
  ~RunningBroker() {
    stop = true;
    thread.join();
  }
  const std::string& endpoint() const { return broker->endpoint(); }
};

struct RunningWorker {
  std::atomic<bool> stop{false};
  std::unique_ptr<messaging::Worker> worker;
  std::thread thread;
  RunningWorker(zmq::context_t& ctx, const std::string& endpoint, const std::string& service,
                messaging::JobHandler handler, int slots = 1, messaging::RequestHandler rh = {},
                const std::string& worker_id = "", const std::string& gpu_name = "") {
    messaging::WorkerOptions o;
    o.endpoint = endpoint;
    o.service = service;
    o.worker_id = worker_id.empty() ? service + "-test" : worker_id;
    o.caps.gpu_name = gpu_name;
    o.slots = slots;
    o.heartbeat_interval_s = 0.1;
    o.heartbeat_liveness = 5;
    o.reconnect_min_s = 0.1;
    worker = std::make_unique<messaging::Worker>(ctx, o, std::move(handler), std::move(rh));
    thread = std::thread([this] { worker->run(stop, 1.0); });
  }
  ~RunningWorker() {
    stop = true;
    thread.join();
  }
};

// A "score" worker that keeps the dead letters the broker sends it.
struct DeadLetterInbox {
  std::mutex mu;
  std::vector<proto::DeadLetter> letters;
  RunningWorker scorer;
  explicit DeadLetterInbox(RunningBroker& b)
      : scorer(b.ctx, b.endpoint(), "score", [this](const proto::Job& job) {
          auto dl = proto::decode<proto::DeadLetter>(job.payload.data);
          REQUIRE(dl.is_ok());
          std::lock_guard l(mu);
          letters.push_back(*dl);
          return messaging::JobOutcome::ok();
        }) {}
  size_t size() {
    std::lock_guard l(mu);
    return letters.size();
  }
};

template <class F>
bool eventually(F pred, double timeout_s = 10) {
  double until = monotonic_s() + timeout_s;
  while (monotonic_s() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

proto::JobStatus job_status(messaging::Client& c, const std::string& id) {
  auto body = c.request("broker", "job", proto::encode(proto::JobStatusQuery{id}));
  REQUIRE(body.is_ok());
  return proto::decode<proto::JobStatus>(*body).value();
}

proto::Submit submit_of(const std::string& service, const std::string& id, const std::string& payload) {
  return proto::Submit{service, id, proto::Bytes{payload}, 0};
}

}  // namespace

TEST_CASE("a job and its follow-up flow through two services", "[broker]") {
  RunningBroker b;
  std::mutex mu;
  std::vector<std::string> seen;
  RunningWorker first(b.ctx, b.endpoint(), "stage1", [&](const proto::Job& job) {
    std::lock_guard l(mu);
    seen.push_back("stage1:" + job.payload.data);
    return messaging::JobOutcome::ok(
        {proto::FollowUp{"stage2", job.job_id + ":next", proto::Bytes{job.payload.data + "+1"}, 0}}, "r1");
  });
  RunningWorker second(b.ctx, b.endpoint(), "stage2", [&](const proto::Job& job) {
    std::lock_guard l(mu);
    seen.push_back("stage2:" + job.payload.data);
    return messaging::JobOutcome::ok();
  });
  messaging::Client client(b.ctx, b.endpoint());
  auto ack = client.submit(submit_of("stage1", "j1", "x"));
  REQUIRE(ack.is_ok());
  CHECK(ack->accepted);
  CHECK_FALSE(ack->duplicate);
  REQUIRE(eventually([&] { return job_status(client, "j1:next").state == "done"; }));
  auto st = job_status(client, "j1");
  CHECK(st.state == "done");
  CHECK(st.result.data == "r1");
  std::lock_guard l(mu);
  CHECK(seen == std::vector<std::string>{"stage1:x", "stage2:x+1"});

  // Idempotent submit: the same id again is a duplicate and runs nothing.
  auto again = client.submit(submit_of("stage1", "j1", "x"));
  REQUIRE(again.is_ok());
  CHECK(again->duplicate);
  CHECK(b.broker->counters().duplicate_submits == 1);
}

TEST_CASE("the broker leases a worker no more jobs than the slots it announced", "[broker]") {
  // The worker queues whatever the broker sends it and runs at most its slots at once, so its own
  // concurrency says nothing about the broker: the broker's lease table does. Jobs are held until
  // released, and the broker has dispatched every submit before it answers the status request after them.
  RunningBroker b;
  std::atomic<bool> release{false};
  std::atomic<int> started{0}, done{0};
  RunningWorker w(
      b.ctx, b.endpoint(), "work",
      [&](const proto::Job&) {
        ++started;
        while (!release) std::this_thread::sleep_for(5ms);
        ++done;
        return messaging::JobOutcome::ok();
      },
      2);
  messaging::Client client(b.ctx, b.endpoint());
  auto status = [&] {
    auto body = client.request("broker", "status", "");
    REQUIRE(body.is_ok());
    return proto::decode<proto::BrokerStatus>(*body).value();
  };
  REQUIRE(eventually([&] { return status().workers.size() == 1; }));
  for (int i = 0; i < 10; ++i) REQUIRE(client.submit(submit_of("work", "w" + std::to_string(i), "")).is_ok());
  REQUIRE(eventually([&] { return started == 2; }));
  auto st = status();
  REQUIRE(st.workers.size() == 1);
  CHECK(st.workers[0].slots == 2);
  CHECK(st.workers[0].in_flight == 2);
  auto queue = std::find_if(st.queues.begin(), st.queues.end(), [](const auto& q) { return q.service == "work"; });
  REQUIRE(queue != st.queues.end());
  CHECK(queue->leased == 2);
  CHECK(queue->queued == 8);
  release = true;
  REQUIRE(eventually([&] { return done == 10; }));
}

TEST_CASE("a silent worker's job is requeued with attempt+1 to another worker", "[broker]") {
  RunningBroker b;
  messaging::Client client(b.ctx, b.endpoint());
  // A raw worker that takes a job and then goes silent (as if SIGKILLed).
  zmq::socket_t rogue(b.ctx, zmq::socket_type::dealer);
  rogue.set(zmq::sockopt::linger, 0);
  rogue.connect(b.endpoint());
  REQUIRE(messaging::send_envelope(rogue, "", proto::cmd::kReady, proto::encode(proto::Ready{"work", "rogue", 1, {}}))
              .is_ok());
  std::this_thread::sleep_for(100ms);
  REQUIRE(client.submit(submit_of("work", "k1", "p")).is_ok());
  // The rogue receives the job...
  bool got_job = eventually(
      [&] {
        auto env = messaging::recv_envelope(rogue, false);
        return env && env->is_ok() && env->value().command == proto::cmd::kJob;
      },
      5);
  REQUIRE(got_job);
  // ...and never answers. A healthy worker arrives and gets it as attempt 2.
  std::atomic<int> attempt{0};
  RunningWorker healthy(b.ctx, b.endpoint(), "work", [&](const proto::Job& job) {
    attempt = job.attempt;
    return messaging::JobOutcome::ok();
  });
  REQUIRE(eventually([&] { return job_status(client, "k1").state == "done"; }));
  CHECK(attempt == 2);
  CHECK(b.broker->counters().requeued >= 1);
}

TEST_CASE("a job that fails while its worker stops is given back and not judged", "[broker]") {
  RunningBroker b;
  messaging::Client client(b.ctx, b.endpoint());
  // The handler fails its job only once the worker has been told to stop, as a compiler whose g++ got the
  // same SIGTERM would (a cancelled Slurm job signals every process of the step).
  std::atomic<bool> started{false};
  std::atomic<std::atomic<bool>*> worker_stop{nullptr};
  auto stopping = std::make_unique<RunningWorker>(b.ctx, b.endpoint(), "work", [&](const proto::Job&) {
    started = true;
    while (!worker_stop.load()->load()) std::this_thread::sleep_for(5ms);
    return messaging::JobOutcome::candidate_fault("compiler killed by SIGTERM");
  });
  worker_stop = &stopping->stop;
  REQUIRE(client.submit(submit_of("work", "k1", "p")).is_ok());
  REQUIRE(eventually([&] { return started.load(); }));
  stopping->stop = true;
  stopping.reset();
  // Given back, not failed: a healthy worker runs it as attempt 2.
  std::atomic<int> attempt{0};
  RunningWorker healthy(b.ctx, b.endpoint(), "work", [&](const proto::Job& job) {
    attempt = job.attempt;
    return messaging::JobOutcome::ok();
  });
  REQUIRE(eventually([&] { return job_status(client, "k1").state == "done"; }));
  CHECK(attempt == 2);
  CHECK(b.broker->counters().requeued >= 1);
}

TEST_CASE("a job that fails every attempt is dead-lettered and the scorer is told", "[broker]") {
  RunningBroker b;
  std::atomic<int> tries{0};
  RunningWorker w(b.ctx, b.endpoint(), "compile", [&](const proto::Job&) {
    ++tries;
    return messaging::JobOutcome::retry("toolchain crashed");
  });
  DeadLetterInbox inbox(b);
  messaging::Client client(b.ctx, b.endpoint());
  REQUIRE(client.submit(submit_of("compile", "c/p1:compile", "candidate")).is_ok());
  REQUIRE(eventually([&] { return inbox.size() == 1; }));
  CHECK(tries == 3);
  std::lock_guard l(inbox.mu);
  const auto& letters = inbox.letters;
  CHECK(letters[0].job_id == "c/p1:compile");
  CHECK(letters[0].payload.data == "candidate");
  CHECK(letters[0].attempts == 3);
  CHECK(letters[0].reason.find("toolchain crashed") != std::string::npos);
  CHECK(letters[0].worker_retry);  // the worker named the fault: the scorer does not blame the payload
  CHECK(job_status(client, "c/p1:compile").state == "dead");
  CHECK(b.broker->counters().dead == 1);
  CHECK(metrics_text(*b.registry).find(R"(kiln_jobs_dead_total{reason="max_attempts",service="compile"} 1)") !=
        std::string::npos);
}

TEST_CASE("a job its worker dead-letters is dead, counted as the worker's, and the scorer told once", "[broker]") {
  RunningBroker b;
  std::atomic<int> tries{0};
  RunningWorker w(b.ctx, b.endpoint(), "compile", [&](const proto::Job&) {
    ++tries;
    return messaging::JobOutcome::dead_letter("the reference does not build");
  });
  // A candidate's own failure, also "failed" and with a follow-up, is no death.
  RunningWorker t(b.ctx, b.endpoint(), "test.cpu", [&](const proto::Job& job) {
    return messaging::JobOutcome::candidate_fault("wrong answer",
                                                  {proto::follow_up("judge", job.job_id + ":judge", "verdict")});
  });
  DeadLetterInbox inbox(b);
  messaging::Client client(b.ctx, b.endpoint());
  REQUIRE(client.submit(submit_of("compile", "c/p1:compile", "candidate")).is_ok());
  REQUIRE(client.submit(submit_of("test.cpu", "c/p2:test", "candidate 2")).is_ok());
  REQUIRE(eventually([&] { return job_status(client, "c/p1:compile").state == "dead"; }));
  REQUIRE(eventually([&] { return job_status(client, "c/p2:test").state == "failed"; }));
  CHECK(job_status(client, "c/p2:test:judge").state == "queued");
  REQUIRE(eventually([&] { return inbox.size() == 1; }));
  CHECK(tries == 1);  // dead at once: no attempt can do better
  {
    std::lock_guard l(inbox.mu);
    CHECK(inbox.letters[0].job_id == "c/p1:compile");
    CHECK(inbox.letters[0].reason == "the reference does not build");
    CHECK(inbox.letters[0].worker_retry);
  }
  CHECK(job_status(client, "c/p1:compile").error == "the reference does not build");

  CHECK(b.broker->counters().dead == 1);
  const std::string text = metrics_text(*b.registry);
  CHECK(text.find(R"(kiln_jobs_dead_total{reason="worker",service="compile"} 1)") != std::string::npos);
  CHECK(text.find(R"(kiln_jobs_completed_total{outcome="failed",service="test.cpu"} 1)") != std::string::npos);
  CHECK(text.find(R"(kiln_jobs_completed_total{outcome="failed",service="compile"})") == std::string::npos);
  CHECK(text.find(R"(kiln_jobs_dead_total{reason="worker",service="test.cpu"})") == std::string::npos);
}

TEST_CASE("a job that outlives its lease every attempt is dead-lettered as no worker's retry", "[broker]") {
  broker::BrokerOptions opt;
  opt.max_attempts = 1;
  opt.lease_timeout_s = {{"default", 0.2}};
  RunningBroker b(opt);
  RunningWorker w(b.ctx, b.endpoint(), "test.cpu", [](const proto::Job&) {
    std::this_thread::sleep_for(500ms);  // past the deadline: the broker gives up on this attempt
    return messaging::JobOutcome::ok();
  });
  DeadLetterInbox inbox(b);
  messaging::Client client(b.ctx, b.endpoint());
  REQUIRE(client.submit(submit_of("test.cpu", "c/p1:test", "candidate")).is_ok());
  REQUIRE(eventually([&] { return inbox.size() == 1; }));
  std::lock_guard l(inbox.mu);
  CHECK(inbox.letters[0].reason == "deadline passed");
  CHECK_FALSE(inbox.letters[0].worker_retry);
}

TEST_CASE("malformed and oversized frames are rejected and the broker keeps serving", "[broker]") {
  RunningBroker b;
  zmq::socket_t bad(b.ctx, zmq::socket_type::dealer);
  bad.set(zmq::sockopt::linger, 0);
  bad.connect(b.endpoint());
  auto send_parts = [&](std::vector<std::string> parts) {
    for (size_t i = 0; i < parts.size(); ++i)
      bad.send(zmq::buffer(parts[i]), i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  };
  send_parts({"garbage"});
  send_parts({"NOTKILN", "READY", "x"});
  send_parts({"KILN1", "FLY", "x"});
  send_parts({"KILN1", "READY", "\xc1\xc1"});
  send_parts({"KILN1", "RESULT", std::string("\xdf\xff\xff\xff\xff", 5)});
  send_parts({"KILN1", "SUBMIT", "\x81\xa1v\x01"});  // valid map, no job id
  send_parts({"KILN1", "READY", "x", "y", "z", "w"});
  std::this_thread::sleep_for(200ms);

  // An oversized frame makes ZeroMQ drop that peer; others are unaffected.
  zmq::socket_t huge(b.ctx, zmq::socket_type::dealer);
  huge.set(zmq::sockopt::linger, 0);
  huge.connect(b.endpoint());
  std::string big(2 << 20, 'x');
  huge.send(zmq::buffer(std::string("KILN1")), zmq::send_flags::sndmore);
  huge.send(zmq::buffer(std::string("SUBMIT")), zmq::send_flags::sndmore);
  huge.send(zmq::buffer(big), zmq::send_flags::none);
  std::this_thread::sleep_for(200ms);

  messaging::Client client(b.ctx, b.endpoint());
  auto body = client.request("broker", "status", "");
  REQUIRE(body.is_ok());
  auto st = proto::decode<proto::BrokerStatus>(*body);
  REQUIRE(st.is_ok());
  CHECK(st->rejected_frames >= 6);
  std::atomic<int> ran{0};
  RunningWorker w(b.ctx, b.endpoint(), "s", [&](const proto::Job&) {
    ++ran;
    return messaging::JobOutcome::ok();
  });
  REQUIRE(client.submit(submit_of("s", "after-garbage", "")).is_ok());
  REQUIRE(eventually([&] { return ran == 1; }));
}

TEST_CASE("requests are routed to a service's worker and time out cleanly", "[broker]") {
  RunningBroker b;
  RunningWorker w(
      b.ctx, b.endpoint(), "score", [](const proto::Job&) { return messaging::JobOutcome::ok(); }, 1,
      [](const proto::Request& r) -> Result<std::string> {
        if (r.method == "echo") return "echo:" + r.body.data;
        return invalid_argument("unknown method");
      });
  messaging::Client client(b.ctx, b.endpoint());
  REQUIRE(eventually([&] {
    auto r = client.request("score", "echo", "hi", 1.0);
    return r.is_ok() && *r == "echo:hi";
  }));
  auto bad = client.request("score", "nope", "", 1.0);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message().find("unknown method") != std::string::npos);
  auto none = client.request("nobody", "x", "", 1.0);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().message().find("no worker") != std::string::npos);
}

TEST_CASE("a restarted broker resumes queued jobs from its table", "[broker]") {
  TempDir dir("kiln-broker-restart");
  std::string db = dir.path() + "/b.db";
  {
    RunningBroker b({}, db);
    messaging::Client client(b.ctx, b.endpoint());
    REQUIRE(client.submit(submit_of("later", "survivor", "keep me")).is_ok());
  }
  RunningBroker b2({}, db);
  std::atomic<bool> got{false};
  std::string payload;
  RunningWorker w(b2.ctx, b2.endpoint(), "later", [&](const proto::Job& job) {
    payload = job.payload.data;
    got = true;
    return messaging::JobOutcome::ok();
  });
  REQUIRE(eventually([&] { return got.load(); }));
  CHECK(payload == "keep me");
}

TEST_CASE("bad service names and commands neither break /metrics nor grow it, and their log is throttled", "[broker]") {
  CapturedLog log;
  broker::BrokerOptions opt;
  opt.log_limits = {5, 3600, 64};  // one interval for the whole test: the line count is exact
  RunningBroker b(opt);
  const std::set<std::string> series_before = series_of(*b.registry);
  zmq::socket_t bad(b.ctx, zmq::socket_type::dealer);
  bad.set(zmq::sockopt::linger, 0);
  bad.connect(b.endpoint());
  auto send_parts = [&](const std::vector<std::string>& parts) {
    for (size_t i = 0; i < parts.size(); ++i)
      bad.send(zmq::buffer(parts[i]), i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  };
  proto::Ready ready;
  ready.service = "\xff\xfe not utf-8";
  ready.worker_id = "w";
  send_parts({"KILN1", "READY", proto::encode(ready)});
  for (int i = 0; i < 300; ++i) send_parts({"KILN1", "CMD" + std::to_string(i), "x"});  // 300 distinct commands
  for (int i = 0; i < 200; ++i) {
    ready.service = "svc " + std::to_string(i);  // a space: not a service name
    send_parts({"KILN1", "READY", proto::encode(ready)});
  }
  messaging::Client client(b.ctx, b.endpoint());
  auto ack = client.submit(submit_of("bad/name", "j1", ""));
  REQUIRE(ack.is_ok());
  CHECK_FALSE(ack->accepted);
  CHECK(ack->error.find("service names are") != std::string::npos);
  REQUIRE(eventually([&] { return b.broker->counters().rejected_frames >= 502; }));

  const std::string text = metrics_text(*b.registry);
  CHECK(valid_utf8(text));
  CHECK(text.find("CMD1") == std::string::npos);
  CHECK(text.find("svc ") == std::string::npos);
  CHECK(text.size() < 64 * 1024);
  // One series per fixed reason, there from the start, whatever the messages said: the set of series
  // is the same as before the flood; only values moved.
  size_t rejected_series = 0;
  for (const auto& family : b.registry->Collect())
    if (family.name == "kiln_broker_rejected_frames_total") rejected_series = family.metric.size();
  CHECK(rejected_series == 13);
  CHECK(series_of(*b.registry) == series_before);
  CHECK(metric_value(*b.registry, "kiln_broker_rejected_frames_total", "reason=invalid_name") == 202);
  CHECK(metric_value(*b.registry, "kiln_broker_rejected_frames_total", "reason=malformed") == 300);
  // A burst of lines per reason (invalid_name, malformed) and interval, not one per frame.
  CHECK(log.count("rejected message") == 10);
}

TEST_CASE("a READY with a bad service name or worker id is refused with a reply that says why", "[broker]") {
  RunningBroker b;
  RawPeer peer(b.ctx, b.endpoint());
  proto::Ready ready{"\xff\xfe not utf-8", "w", 1, {}};
  peer.send({"KILN1", "READY", proto::encode(ready)});
  CHECK(peer.refusal() == "READY refused: service names are 1-64 bytes of letters, digits, '.', '_' and '-'");

  ready = proto::Ready{std::string(65, 's'), "w", 1, {}};  // one byte too long
  peer.send({"KILN1", "READY", proto::encode(ready)});
  REQUIRE(peer.wait_for(proto::cmd::kAck));
  ready = proto::Ready{"fine", "bad\nid", 1, {}};
  peer.send({"KILN1", "READY", proto::encode(ready)});
  CHECK(peer.refusal() == "READY refused: worker ids are 1-128 bytes of printable ASCII");
  ready = proto::Ready{"fine", "w", 1, {}};
  ready.caps.gpu_name = "GPU\x1b[2J";  // the name is logged and matched against jobs' device
  peer.send({"KILN1", "READY", proto::encode(ready)});
  CHECK(peer.refusal() == "READY refused: device names are at most 128 bytes of printable text");
  CHECK(metric_value(*b.registry, "kiln_broker_rejected_frames_total", "reason=invalid_name") == 4);
  // None of them registered a worker or a service.
  messaging::Client client(b.ctx, b.endpoint());
  auto body = client.request("broker", "status", "");
  REQUIRE(body.is_ok());
  auto st = proto::decode<proto::BrokerStatus>(*body);
  REQUIRE(st.is_ok());
  CHECK(st->workers.empty());
  CHECK(st->queues.empty());
}

TEST_CASE("the broker serves at most 256 services, taking back the slots of those no worker serves", "[broker]") {
  RunningBroker b;
  messaging::Client client(b.ctx, b.endpoint());
  for (int i = 0; i < 256; ++i) {
    auto ack = client.submit(submit_of("s" + std::to_string(i), "j" + std::to_string(i), ""));
    REQUIRE(ack.is_ok());
    REQUIRE(ack->accepted);
  }
  // At the limit, the unserved queue untouched longest gives up its slot: its job fails, saying why.
  auto ack = client.submit(submit_of("one-too-many", "j-last", ""));
  REQUIRE(ack.is_ok());
  CHECK(ack->accepted);
  auto dropped = job_status(client, "j0");
  CHECK(dropped.state == "failed");
  CHECK(dropped.error.find("no worker served 's0'") != std::string::npos);
  CHECK(job_status(client, "j1").state == "queued");
  ack = client.submit(submit_of("s7", "j-again", ""));  // one it has still takes jobs
  REQUIRE(ack.is_ok());
  CHECK(ack->accepted);
  // A request names no new service.
  auto none = client.request("never-served", "x", "", 1.0);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().message().find("no worker") != std::string::npos);
  // Kiln's own services are not crowded out.
  ack = client.submit(submit_of("compile", "j-compile", ""));
  REQUIRE(ack.is_ok());
  CHECK(ack->accepted);
  // Services nobody serves share one series; a service gets its own once a worker registers for it.
  auto text = metrics_text(*b.registry);
  CHECK(text.find("service=\"s7\"") == std::string::npos);
  CHECK(metric_value(*b.registry, "kiln_queue_depth_jobs", "service=~other") == 257);
  CHECK(metric_value(*b.registry, "kiln_queue_depth_jobs", "service=compile") == 1);
  std::atomic<int> ran{0};
  {
    RunningWorker w(b.ctx, b.endpoint(), "s7", [&](const proto::Job&) {
      ++ran;
      return messaging::JobOutcome::ok();
    });
    REQUIRE(eventually([&] { return ran == 2; }));
    REQUIRE(eventually([&] { return metric_value(*b.registry, "kiln_queue_depth_jobs", "service=~other") == 255; }));
    CHECK(metric_value(*b.registry, "kiln_workers_connected", "service=s7") == 1);
  }
  // s7, served and gone, is idle: the next new service takes its slot (before any queue's jobs fail),
  // and its series go with it.
  REQUIRE(eventually([&] { return metric_value(*b.registry, "kiln_workers_connected", "service=s7") == 0; }));
  ack = client.submit(submit_of("another-new-one", "j-other", ""));
  REQUIRE(ack.is_ok());
  CHECK(ack->accepted);
  CHECK(job_status(client, "j1").state == "queued");
  CHECK(metrics_text(*b.registry).find("service=\"s7\"") == std::string::npos);
}

TEST_CASE("job and request ids that are not UTF-8 text are refused, never echoed or logged", "[broker]") {
  CapturedLog log;
  RunningBroker b;
  RawPeer peer(b.ctx, b.endpoint());
  const std::string bad_ids[] = {std::string("\xff\xfe", 2), std::string("\xc0\x80", 2), "a\nb", "\xed\xa0\x80"};
  for (const auto& id : bad_ids) {
    peer.send({"KILN1", "SUBMIT", proto::encode(submit_of("compile", id, "x"))});
    auto ack = peer.wait_for(proto::cmd::kAck);
    REQUIRE(ack);
    auto a = proto::decode<proto::Ack>(ack->body);
    REQUIRE(a.is_ok());
    CHECK_FALSE(a->accepted);
    CHECK(a->job_id.empty());
    CHECK(a->error == "job ids are 1-512 bytes of UTF-8 text without control characters");

    proto::Request req;
    req.request_id = id;
    req.service = "broker";
    req.method = "status";
    peer.send({"KILN1", "REQUEST", proto::encode(req)});
    auto reply = peer.wait_for(proto::cmd::kReply);
    REQUIRE(reply);
    auto r = proto::decode<proto::Reply>(reply->body);
    REQUIRE(r.is_ok());
    CHECK_FALSE(r->ok);
    CHECK(r->request_id.empty());
    CHECK(r->error == "request ids are UTF-8 text without control characters");
  }
  // Text ids of any script are fine, and an unknown method is named printably.
  peer.send({"KILN1", "SUBMIT", proto::encode(submit_of("compile", "kernel-\xc3\xa9t\xc3\xa9", "x"))});
  auto ack = peer.wait_for(proto::cmd::kAck);
  REQUIRE(ack);
  CHECK(proto::decode<proto::Ack>(ack->body)->accepted);
  proto::Request odd;
  odd.request_id = "r1";
  odd.service = "broker";
  odd.method = std::string("\xff\x01", 2);
  peer.send({"KILN1", "REQUEST", proto::encode(odd)});
  auto reply = peer.wait_for(proto::cmd::kReply);
  REQUIRE(reply);
  CHECK(proto::decode<proto::Reply>(reply->body)->error.starts_with("broker: unknown method '0xff01'"));
  CHECK(metric_value(*b.registry, "kiln_broker_rejected_frames_total", "reason=bad_submit") == 4);
  CHECK(metric_value(*b.registry, "kiln_broker_rejected_frames_total", "reason=bad_request") == 4);
  spdlog::default_logger()->flush();
  CHECK(valid_utf8(log.out.str()));
  CHECK(log.out.str().find("a\nb") == std::string::npos);
}

TEST_CASE("a peer dropped for an oversized frame is counted", "[broker]") {
  RunningBroker b;
  auto disconnects = [&] {
    double total = 0;
    for (const auto& family : b.registry->Collect())
      if (family.name == "kiln_broker_disconnects_total")
        for (const auto& m : family.metric) total += m.counter.value;
    return total;
  };
  zmq::socket_t huge(b.ctx, zmq::socket_type::dealer);
  huge.set(zmq::sockopt::linger, 0);
  huge.connect(b.endpoint());
  huge.send(zmq::buffer(std::string("KILN1")), zmq::send_flags::sndmore);
  huge.send(zmq::buffer(std::string("SUBMIT")), zmq::send_flags::sndmore);
  huge.send(zmq::buffer(std::string(3 << 20, 'x')), zmq::send_flags::none);  // over twice max_message_bytes
  CHECK(eventually([&] { return disconnects() >= 1; }));
}

TEST_CASE("a message over max_message_bytes is counted as oversized and a SUBMIT is answered", "[broker]") {
  CapturedLog log;
  RunningBroker b;  // max_message_bytes: 1 MiB
  messaging::Client client(b.ctx, b.endpoint());
  auto ack = client.submit(submit_of("work", "too-big", std::string((1 << 20) + 4096, 'x')), 5.0);
  REQUIRE(ack.is_ok());
  CHECK_FALSE(ack->accepted);
  CHECK(ack->error.find("is over broker.max_message_bytes (1048576)") != std::string::npos);
  RawPeer peer(b.ctx, b.endpoint());
  peer.send({"KILN1", "RESULT", std::string((1 << 20) + 1, 'r')});
  REQUIRE(eventually(
      [&] { return metric_value(*b.registry, "kiln_broker_rejected_frames_total", "reason=oversized") == 2; }));
  CHECK(log.count("(oversized)") == 2);
  // The same client goes on: a job at the limit is taken.
  ack = client.submit(submit_of("work", "fits", std::string(1 << 19, 'x')));
  REQUIRE(ack.is_ok());
  CHECK(ack->accepted);
}

TEST_CASE("a full job table refuses submits with a logged error and takes them again once jobs finish", "[broker]") {
  CapturedLog log;
  broker::BrokerOptions opt;
  opt.max_table_bytes = 256 << 10;
  opt.max_message_bytes = 4 << 20;
  RunningBroker b(opt);
  messaging::Client client(b.ctx, b.endpoint());
  const std::string payload(32 << 10, 'p');
  int accepted = 0;
  std::string refusal;
  for (int i = 0; i < 64 && refusal.empty(); ++i) {
    auto ack = client.submit(submit_of("work", "fill-" + std::to_string(i), payload));
    REQUIRE(ack.is_ok());
    if (ack->accepted) {
      ++accepted;
    } else {
      refusal = ack->error;
    }
  }
  INFO(refusal);
  REQUIRE(accepted >= 2);
  REQUIRE_FALSE(refusal.empty());
  CHECK(log.count("refusing new jobs until writes succeed again") == 1);

  // Finishing the queued jobs frees their payloads: the broker takes jobs again without a restart.
  std::atomic<int> ran{0};
  RunningWorker w(b.ctx, b.endpoint(), "work", [&](const proto::Job&) {
    ++ran;
    return messaging::JobOutcome::ok();
  });
  REQUIRE(eventually([&] { return ran == accepted; }));
  REQUIRE(eventually([&] {
    auto ack = client.submit(submit_of("work", "after-full", payload));
    return ack.is_ok() && ack->accepted;
  }));
  REQUIRE(eventually([&] { return ran == accepted + 1; }));
}

namespace {

// Which worker ran each job, in order: each worker's handler is record(its name).
struct RanOn {
  std::mutex mu;
  std::vector<std::string> names;
  messaging::JobHandler record(const std::string& name) {
    return [this, name](const proto::Job&) {
      std::lock_guard l(mu);
      names.push_back(name);
      return messaging::JobOutcome::ok();
    };
  }
  std::vector<std::string> list() {
    std::lock_guard l(mu);
    return names;
  }
};

// A worker of "first" that hands each job on to "check", with the routing a confirmation carries.
RunningWorker hand_on_to_check(RunningBroker& b, const std::string& avoid_worker, const std::string& device) {
  return RunningWorker(b.ctx, b.endpoint(), "first", [avoid_worker, device](const proto::Job& job) {
    proto::FollowUp next{"check", job.job_id + ":check", proto::Bytes{""}, 0, avoid_worker, device};
    return messaging::JobOutcome::ok({next});
  });
}

// How many workers of `service` the broker lists.
int workers_of(messaging::Client& client, const std::string& service) {
  auto st = client.request("broker", "status", "");
  if (!st.is_ok()) return -1;
  auto status = proto::decode<proto::BrokerStatus>(*st);
  if (!status.is_ok()) return -1;
  int n = 0;
  for (const auto& w : status->workers) n += w.service == service;
  return n;
}

}  // namespace

TEST_CASE("a follow-up that avoids a worker goes to another of the same device model when one is connected",
          "[broker]") {
  RunningBroker b;
  // "first" hands each job on to "check", avoiding the worker "check-a" (as a confirmation avoids the
  // tester that made the first measurement).
  RunningWorker first = hand_on_to_check(b, "check-a", "");
  RanOn ran;
  messaging::Client client(b.ctx, b.endpoint());
  {
    // check-c has another device model than check-a: a confirmation there would not count.
    RunningWorker a(b.ctx, b.endpoint(), "check", ran.record("a"), 4, {}, "check-a", "GPU-X");
    RunningWorker c(b.ctx, b.endpoint(), "check", ran.record("c"), 4, {}, "check-c", "GPU-Y");
    RunningWorker bw(b.ctx, b.endpoint(), "check", ran.record("b"), 1, {}, "check-b", "GPU-X");
    REQUIRE(eventually([&] { return workers_of(client, "check") == 3; }));
    for (int i = 0; i < 6; ++i) REQUIRE(client.submit(submit_of("first", "j" + std::to_string(i), "")).is_ok());
    REQUIRE(eventually([&] { return ran.list().size() == 6; }));
    // check-a and check-c are idle with 4 slots each, yet every job waited for check-b.
    for (const auto& who : ran.list()) CHECK(who == "b");
  }
  // With only the avoided worker connected, it takes the job rather than let it wait forever.
  RunningWorker a(b.ctx, b.endpoint(), "check", ran.record("a"), 1, {}, "check-a");
  REQUIRE(client.submit(submit_of("first", "alone", "")).is_ok());
  REQUIRE(eventually([&] { return ran.list().size() == 7; }));
  CHECK(ran.list().back() == "a");
}

TEST_CASE("a follow-up that names a device model waits for a worker of it, and ends unrun after device_wait_s",
          "[broker]") {
  broker::BrokerOptions opt;
  opt.device_wait_s = 1.0;
  RunningBroker b(opt);
  DeadLetterInbox inbox(b);
  // "first" hands each job on to "check", to be run on a GPU-X (as a confirmation names its model).
  RunningWorker first = hand_on_to_check(b, "", "GPU-X");
  RanOn ran;
  messaging::Client client(b.ctx, b.endpoint());
  RunningWorker y(b.ctx, b.endpoint(), "check", ran.record("y"), 4, {}, "check-y", "GPU-Y");
  REQUIRE(client.submit(submit_of("first", "late", "")).is_ok());
  // Only a GPU-Y serves "check": the job waits, then is dead-lettered as not run, saying why.
  REQUIRE(eventually([&] { return inbox.size() == 1; }));
  {
    std::lock_guard l(inbox.mu);
    CHECK(inbox.letters[0].job_id == "late:check");
    CHECK(inbox.letters[0].worker_retry);
    CHECK(inbox.letters[0].reason ==
          "no worker of 'check' on 'GPU-X' was connected for 1 s (it must run on the device "
          "model it names)");
  }
  CHECK(job_status(client, "late:check").state == "dead");
  // A GPU-X joins: the next one runs there, though the idle GPU-Y registered first.
  RunningWorker x(b.ctx, b.endpoint(), "check", ran.record("x"), 1, {}, "check-x", "GPU-X");
  // Registered before the job exists, so its wait cannot run out on a slow machine.
  REQUIRE(eventually([&] { return workers_of(client, "check") == 2; }));
  REQUIRE(client.submit(submit_of("first", "served", "")).is_ok());
  REQUIRE(eventually([&] { return job_status(client, "served:check").state == "done"; }));
  CHECK(ran.list() == std::vector<std::string>{"x"});
}

TEST_CASE("the broker's status counts the jobs waiting for a device model no worker has", "[broker]") {
  broker::BrokerOptions opt;
  opt.device_wait_s = 0;  // for ever
  RunningBroker b(opt);
  RunningWorker first = hand_on_to_check(b, "", "GPU-X");
  messaging::Client client(b.ctx, b.endpoint());
  auto waiting = [&] {
    auto body = client.request("broker", "status", "");
    REQUIRE(body.is_ok());
    auto st = proto::decode<proto::BrokerStatus>(*body);
    REQUIRE(st.is_ok());
    for (const auto& q : st->queues)
      if (q.service == "check") return q.waiting_for_device;
    return std::map<std::string, int64_t>{};
  };
  RunningWorker y(
      b.ctx, b.endpoint(), "check", [](const proto::Job&) { return messaging::JobOutcome::ok(); }, 1, {}, "check-y",
      "GPU-Y");
  REQUIRE(client.submit(submit_of("first", "a", "")).is_ok());
  REQUIRE(client.submit(submit_of("first", "b", "")).is_ok());
  REQUIRE(eventually([&] { return waiting() == std::map<std::string, int64_t>{{"GPU-X", 2}}; }));
  RunningWorker x(
      b.ctx, b.endpoint(), "check", [](const proto::Job&) { return messaging::JobOutcome::ok(); }, 1, {}, "check-x",
      "GPU-X");
  REQUIRE(eventually([&] { return job_status(client, "b:check").state == "done"; }));
  CHECK(job_status(client, "a:check").state == "done");
  CHECK(waiting().empty());
}

TEST_CASE("while the job table cannot write, new jobs are refused as retryable, and it recovers by itself",
          "[broker]") {
  CapturedLog log;
  std::atomic<bool> disk_full{false};
  broker::BrokerOptions opt;
  opt.log_limits = {5, 3600, 64};
  opt.store_write_fault = [&](std::string_view) {
    return disk_full ? resource_exhausted("database or disk is full") : Status::ok();
  };
  RunningBroker b(opt);
  messaging::Client client(b.ctx, b.endpoint());
  auto writable = [&] { return metric_value(*b.registry, "kiln_broker_store_writable"); };
  CHECK(writable() == 1);

  disk_full = true;
  for (int i = 0; i < 20; ++i) {
    auto ack = client.submit(submit_of("work", "refused-" + std::to_string(i), "p"));
    REQUIRE(ack.is_ok());
    CHECK_FALSE(ack->accepted);
    CHECK(ack->retryable);
    CHECK(ack->error == "the broker cannot write its job table (database or disk is full); retry later");
  }
  CHECK(writable() == 0);
  CHECK_FALSE(b.broker->counters().store_writable);
  CHECK(metric_value(*b.registry, "kiln_broker_store_write_failures_total", "op=insert") == 20);
  CHECK(metric_value(*b.registry, "kiln_broker_rejected_frames_total", "reason=store_unavailable") == 20);
  // One line when the table stops taking writes, then a burst: not a line per refusal.
  CHECK(log.count("refusing new jobs until writes succeed again") == 1);
  CHECK(log.count("job table: insert of job") == 1 + 5);

  // The first write that succeeds ends the refusals: no restart.
  disk_full = false;
  auto ack = client.submit(submit_of("work", "after", "p"));
  REQUIRE(ack.is_ok());
  CHECK(ack->accepted);
  CHECK_FALSE(ack->retryable);
  CHECK(writable() == 1);
  CHECK(log.count("job table: writes succeed again") == 1);
  std::atomic<int> ran{0};
  RunningWorker w(b.ctx, b.endpoint(), "work", [&](const proto::Job&) {
    ++ran;
    return messaging::JobOutcome::ok();
  });
  REQUIRE(eventually([&] { return job_status(client, "after").state == "done"; }));
  CHECK(ran == 1);
  CHECK(job_status(client, "refused-0").state == "unknown");
}

TEST_CASE("a result the table cannot record is run again, and a dead letter waits for the table", "[broker]") {
  std::atomic<bool> disk_full{false};
  broker::BrokerOptions opt;
  opt.max_attempts = 1;
  opt.store_write_fault = [&](std::string_view op) {
    return disk_full && op == "complete" ? resource_exhausted("database or disk is full") : Status::ok();
  };
  RunningBroker b(opt);
  messaging::Client client(b.ctx, b.endpoint());
  DeadLetterInbox inbox(b);
  std::atomic<int> tries{0};
  RunningWorker w(b.ctx, b.endpoint(), "work", [&](const proto::Job&) {
    ++tries;
    return messaging::JobOutcome::ok();
  });
  disk_full = true;
  REQUIRE(client.submit(submit_of("work", "unrecorded", "p")).is_ok());
  // The result cannot be recorded; with max_attempts 1 the job is to be dead-lettered, which cannot be
  // recorded either: it waits (neither lost nor leased again) until the table writes.
  REQUIRE(eventually([&] { return b.broker->counters().store_write_failures >= 3; }));
  CHECK(tries == 1);
  CHECK(job_status(client, "unrecorded").state == "leased");
  disk_full = false;
  REQUIRE(eventually([&] { return job_status(client, "unrecorded").state == "dead"; }));
  REQUIRE(eventually([&] { return inbox.size() == 1; }));
  CHECK(tries == 1);
  std::lock_guard l(inbox.mu);
  CHECK(inbox.letters[0].reason.find("could not record its result") != std::string::npos);
}

TEST_CASE("a RESULT the broker refuses releases its job at once and tells the worker why", "[broker]") {
  RunningBroker b;  // leases: 60 s by default; everything below happens well within one
  messaging::Client client(b.ctx, b.endpoint());
  RawPeer rogue(b.ctx, b.endpoint());
  rogue.send({"KILN1", "READY", proto::encode(proto::Ready{"work", "rogue", 1, {}})});
  REQUIRE(client.submit(submit_of("work", "r1", "p")).is_ok());
  auto job_env = rogue.wait_for(proto::cmd::kJob);
  REQUIRE(job_env);
  auto job = proto::decode<proto::Job>(job_env->body);
  REQUIRE(job.is_ok());
  CHECK(job->attempt == 1);

  SECTION("a body that does not decode but names the job") {
    // "next" must be a list: the RESULT does not decode, yet its job id can be read.
    std::string bad = "\x83\xa1v\x02\xa6job_id" + std::string(1, static_cast<char>(0xa0 + job->job_id.size())) +
                      job->job_id + "\xa4next\x05";
    rogue.send({"KILN1", "RESULT", bad});
  }
  SECTION("an outcome that is none of ok, failed, retry") {
    proto::ResultMsg res{job->job_id, job->attempt, "maybe", {}, "", {}};
    rogue.send({"KILN1", "RESULT", proto::encode(res)});
  }
  SECTION("a follow-up to an invalid service name") {
    proto::ResultMsg res{job->job_id, job->attempt, "ok", {}, "", {proto::FollowUp{"bad name", "x", {}, 0}}};
    rogue.send({"KILN1", "RESULT", proto::encode(res)});
  }
  SECTION("a follow-up whose device is not printable text") {
    proto::ResultMsg res{job->job_id, job->attempt, "ok", {}, "", {proto::FollowUp{"work", "x", {}, 0, "", "H200\n"}}};
    rogue.send({"KILN1", "RESULT", proto::encode(res)});
  }
  auto ack_env = rogue.wait_for(proto::cmd::kAck);
  REQUIRE(ack_env);
  auto ack = proto::decode<proto::Ack>(ack_env->body);
  REQUIRE(ack.is_ok());
  CHECK(ack->job_id == "r1");
  CHECK(ack->error.rfind("RESULT refused: ", 0) == 0);
  CHECK(ack->error.find("(the job was released)") != std::string::npos);
  // Released now, not when its lease ends: the only worker gets it again as attempt 2.
  auto again = rogue.wait_for(proto::cmd::kJob);
  REQUIRE(again);
  CHECK(proto::decode<proto::Job>(again->body)->attempt == 2);
  CHECK(b.broker->counters().refused_results == 1);
  CHECK(metric_value(*b.registry, "kiln_jobs_requeued_total", "reason=result_refused") == 1);
}

TEST_CASE("propose.external gets the propose lease (300 s) from configs/kiln.yaml and the built-in defaults",
          "[broker]") {
  for (const std::string& path : {std::string(KILN_SOURCE_DIR) + "/configs/kiln.yaml", std::string()}) {
    INFO("config: " << (path.empty() ? "built-in defaults" : path));
    auto cfg = config::load_config(path);
    REQUIRE(cfg.is_ok());
    TempDir state("kiln-broker-config");
    broker::BrokerOptions opt = broker::options_from_config(cfg->broker, state.path());
    CHECK(opt.db_path == state.path() + "/broker.db");
    RunningBroker b(opt);
    messaging::Client client(b.ctx, b.endpoint());
    RawPeer bridge(b.ctx, b.endpoint());
    bridge.send({"KILN1", "READY", proto::encode(proto::Ready{"propose.external", "bridge", 1, {}})});
    REQUIRE(client.submit(submit_of("propose.external", "c/p1:propose", "")).is_ok());
    auto env = bridge.wait_for(proto::cmd::kJob);
    REQUIRE(env);
    double lease_s = proto::decode<proto::Job>(env->body)->deadline - wall_time_s();
    CHECK(lease_s > 290);
    CHECK(lease_s <= 300);
  }
}

TEST_CASE("workers configured with another heartbeat period than the broker's stay connected", "[broker][serial]") {
  // The broker beats every 1.2 s and gives up on a peer that beats as often after 2.4 s of silence (numbers
  // other than BrokerOptions' defaults, which RunningBroker replaces). Every margin is wide, so a loaded
  // machine's scheduling delays move nothing: the slow worker beats every 3 s (a broker judging it by its
  // own period drops it at 2.4 s; by the worker's own, after 6 s), and the fast one gives up after 0.8 s
  // without a beat (the broker's own period, 1.2 s, would lose it; beats at the worker's period, 0.1 s,
  // leave 0.7 s to spare).
  broker::BrokerOptions opt;
  opt.heartbeat_interval_s = 1.2;
  opt.heartbeat_liveness = 2;
  CapturedLog log;
  RunningBroker b(opt);
  auto start = [&](const std::string& service, double period, int liveness) {
    messaging::WorkerOptions o;
    o.endpoint = b.endpoint();
    o.service = service;
    o.worker_id = service + "-w";
    o.heartbeat_interval_s = period;
    o.heartbeat_liveness = liveness;
    o.reconnect_min_s = 0.1;
    return std::make_unique<messaging::Worker>(b.ctx, o, [](const proto::Job&) { return messaging::JobOutcome::ok(); });
  };
  auto slow = start("slow", 3.0, 3);
  auto fast = start("fast", 0.1, 8);
  std::atomic<bool> stop{false};
  std::thread ts([&] { slow->run(stop, 1.0); });
  std::thread tf([&] { fast->run(stop, 1.0); });
  // Past the slow worker's second beat (3 s after its READY), and many of the fast worker's periods.
  std::this_thread::sleep_for(4s);
  // Both still hold their first registration: neither was dropped by the broker nor left it.
  CHECK(log.count("worker lost") == 0);
  CHECK(log.count("broker silent") == 0);
  CHECK(log.count("worker slow-w ready") == 1);
  CHECK(log.count("worker fast-w ready") == 1);
  messaging::Client client(b.ctx, b.endpoint());
  for (const char* service : {"slow", "fast"}) {
    INFO(service);
    auto ack = client.submit(submit_of(service, std::string(service) + "-job", "x"));
    REQUIRE(ack.is_ok());
    CHECK(eventually([&] { return job_status(client, std::string(service) + "-job").state == "done"; }, 5));
  }
  stop = true;
  ts.join();
  tf.join();
}

TEST_CASE("the broker registers at most max_workers workers and says so to the next", "[broker]") {
  broker::BrokerOptions opt;
  opt.max_workers = 2;
  RunningBroker b(opt);
  auto ready_from = [&](RawPeer& peer, const std::string& id) {
    peer.send({"KILN1", "READY", proto::encode(proto::Ready{"compile", id, 1, {}})});
  };
  RawPeer a(b.ctx, b.endpoint()), c(b.ctx, b.endpoint()), d(b.ctx, b.endpoint());
  ready_from(a, "a");
  ready_from(c, "c");
  messaging::Client client(b.ctx, b.endpoint());
  auto workers = [&] {
    auto body = client.request("broker", "status", "");
    REQUIRE(body.is_ok());
    return proto::decode<proto::BrokerStatus>(*body)->workers.size();
  };
  REQUIRE(eventually([&] { return workers() == 2; }));
  ready_from(d, "d");
  CHECK(d.refusal() == "READY refused: the broker serves at most 2 workers at once");
  CHECK(metric_value(*b.registry, "kiln_broker_rejected_frames_total", "reason=too_many_workers") == 1);
  // A registered worker may register again (a reconnect) without counting twice.
  ready_from(a, "a");
  CHECK_FALSE(a.wait_for(proto::cmd::kAck, 0.3));
  CHECK(workers() == 2);
}

TEST_CASE("the blob store keeps content by its sha256 across restarts and refuses content under a false name",
          "[broker][blobs]") {
  TempDir dir("kiln-broker-blobs");
  const std::string db = dir.path() + "/b.db";
  const std::string package = proto::encode(proto::TaskFiles{{{"task.yaml", proto::Bytes{"name: t\n"}}}});
  std::string name;
  {
    RunningBroker b({}, db);
    auto blobs = messaging::BlobClient::connect(b.ctx, b.endpoint(), {}, 2.0);
    auto put = blobs->put(package);
    REQUIRE(put.is_ok());
    name = *put;
    CHECK(name == sha256_hex(package));
    CHECK(blobs->put(package).value() == name);  // once per process: no second round trip needed

    messaging::Client client(b.ctx, b.endpoint());
    // Content under another content's name, a name that is no sha256, and a body that does not decode.
    auto forged =
        client.request("broker", "blob.put", proto::encode(proto::Blob{sha256_hex("other"), proto::Bytes{"x"}}));
    REQUIRE_FALSE(forged.is_ok());
    CHECK(forged.status().message().find("does not hash to") != std::string::npos);
    auto bad_name =
        client.request("broker", "blob.put", proto::encode(proto::Blob{"../../etc/passwd", proto::Bytes{"x"}}));
    REQUIRE_FALSE(bad_name.is_ok());
    CHECK(bad_name.status().message().find("not a lowercase hex sha256") != std::string::npos);
    CHECK_FALSE(client.request("broker", "blob.get", "not msgpack").is_ok());
    auto missing = client.request("broker", "blob.get", proto::encode(proto::BlobQuery{sha256_hex("never put")}));
    REQUIRE_FALSE(missing.is_ok());
    CHECK(missing.status().message().find("no blob") != std::string::npos);
    CHECK(client.request("broker", "blob.has", proto::encode(proto::BlobQuery{name})).is_ok());
    CHECK_FALSE(client.request("broker", "blob.has", proto::encode(proto::BlobQuery{sha256_hex("never put")})).is_ok());
  }
  // Another process, after a broker restart: the content comes back, checked against its name, and is
  // fetched once.
  RunningBroker b2({}, db);
  auto fresh = messaging::BlobClient::connect(b2.ctx, b2.endpoint(), {}, 2.0);
  auto got = fresh->get(name);
  REQUIRE(got.is_ok());
  CHECK(**got == package);
  CHECK(fresh->get(name).is_ok());
  CHECK(fresh->fetches() == 1);
  auto unknown = fresh->get(sha256_hex("never put"));
  REQUIRE_FALSE(unknown.is_ok());
  CHECK(unknown.status().code() == StatusCode::kUnavailable);  // a job waiting on it is retried
}
