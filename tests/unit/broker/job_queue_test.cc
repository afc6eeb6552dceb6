// The broker's job queue alone, without sockets: leases and their deadlines on a clock the test moves,
// requeues with attempt + 1, dead letters past max_attempts, late results dropped, completions that queue
// their follow-ups, and workers that go silent or cannot be reached.
#include <catch2/catch.hpp>
#include <prometheus/registry.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/broker/job_queue.h"
#include "kiln/core/files.h"
#include "kiln/proto/payloads.h"

using namespace kiln;
using broker::JobQueue;
using broker::JobRow;
using broker::JobState;

namespace {

// Records what the queue tells the world; a worker listed in `unreachable` is removed on delivery, as the
// broker removes a peer its socket cannot reach.
struct Recorder : broker::QueueListener {
  JobQueue* queue = nullptr;
  std::set<std::string> unreachable;
  std::vector<std::pair<std::string, proto::Job>> delivered;  // (worker identity, job)
  std::vector<std::string> events;                            // "<job id> <state> <attempt>"
  std::vector<std::string> removed;

  void job_state(const std::string& job_id, const std::string&, std::string_view state, int attempt) override {
    events.push_back(job_id + " " + std::string(state) + " " + std::to_string(attempt));
  }
  void deliver(const std::string& identity, const proto::Job& job) override {
    if (unreachable.count(identity)) return queue->remove_worker(identity, "unreachable");
    delivered.emplace_back(identity, job);
  }
  void worker_removed(const std::string& identity) override { removed.push_back(identity); }

  bool saw(const std::string& event) const { return std::find(events.begin(), events.end(), event) != events.end(); }
};

// A queue over a fresh table, with a clock that only moves when the test says so.
struct Fixture {
  TempDir dir{"kiln-jobqueue"};
  broker::BrokerOptions opt;
  prometheus::Registry registry;
  std::unique_ptr<broker::BrokerMetrics> metrics;
  std::unique_ptr<JobQueue> queue;
  Recorder rec;
  double now = 1000;

  explicit Fixture(int max_attempts = 3) {
    opt.max_attempts = max_attempts;
    opt.heartbeat_interval_s = 1.0;
    opt.heartbeat_liveness = 4;
    opt.lease_timeout_s = {{"default", 60}, {"compile", 30}, {"propose", 120}};
    opt.max_workers = 3;
    metrics = std::make_unique<broker::BrokerMetrics>(registry);
    auto table = broker::JobTable::open(dir.path() + "/broker.db");
    REQUIRE(table.is_ok());
    queue = std::make_unique<JobQueue>(std::move(table).value(), opt, *metrics, [this] { return now; });
    rec.queue = queue.get();
    queue->set_listener(&rec);
  }

  const broker::BrokerCounters& counters() const { return metrics->counters(); }

  void submit(const std::string& id, const std::string& service = "compile", double timeout_s = 0) {
    JobRow row;
    row.id = id;
    row.service = service;
    row.payload = "payload of " + id;
    row.timeout_s = timeout_s;
    auto inserted = queue->submit(row);
    REQUIRE(inserted.is_ok());
    REQUIRE(*inserted);
  }

  void add_worker(const std::string& id, const std::string& service = "compile", int slots = 1,
                  const std::string& gpu = "") {
    broker::Worker w;
    w.identity = "i" + id;
    w.service = service;
    w.worker_id = id;
    w.slots = slots;
    w.caps.gpu_name = gpu;
    REQUIRE(queue->add_worker(std::move(w)).is_ok());
  }

  JobState state_of(const std::string& id) {
    auto row = queue->table().get(id);
    REQUIRE(row.is_ok());
    return row->state;
  }
  int attempt_of(const std::string& id) {
    auto row = queue->table().get(id);
    REQUIRE(row.is_ok());
    return row->attempt;
  }
  const broker::LiveJob& live(const std::string& id) {
    auto it = queue->jobs().find(id);
    REQUIRE(it != queue->jobs().end());
    return it->second;
  }
  // Keeps every worker alive (a message from each) and moves the clock.
  void advance(double seconds) {
    now += seconds;
    for (const auto& [identity, w] : queue->workers()) queue->heard_from(identity);
  }
};

}  // namespace

TEST_CASE("job queue: jobs are leased within each worker's credit, with the service's lease", "[broker][job_queue]") {
  Fixture f;
  f.submit("a");
  f.submit("b");
  f.submit("c");
  f.submit("p", "propose.external");  // nobody serves it: it waits
  f.add_worker("w1", "compile", 2);
  f.queue->dispatch();
  REQUIRE(f.rec.delivered.size() == 2);
  CHECK(f.rec.delivered[0].first == "iw1");
  CHECK(f.rec.delivered[0].second.job_id == "a");
  CHECK(f.rec.delivered[0].second.attempt == 1);
  CHECK(f.rec.delivered[0].second.payload.data == "payload of a");
  CHECK(f.rec.delivered[1].second.job_id == "b");
  CHECK(f.live("a").lease_deadline == Approx(f.now + 30));  // compile's lease
  CHECK(f.state_of("a") == JobState::kLeased);
  CHECK(f.state_of("c") == JobState::kQueued);
  CHECK(f.queue->worker("iw1")->leased.size() == 2);
  CHECK(f.rec.saw("a queued 1"));
  CHECK(f.rec.saw("a leased 1"));

  f.queue->dispatch();  // no credit left: nothing more
  CHECK(f.rec.delivered.size() == 2);
  CHECK(f.queue->services().at("compile").queued.size() == 1);

  // A job's own timeout wins; "propose.external" takes its family's lease.
  f.submit("t", "compile", 5);
  f.add_worker("w2", "compile", 2);
  f.add_worker("x1", "propose.external");
  f.queue->dispatch();
  CHECK(f.live("t").lease_deadline == Approx(f.now + 5));
  CHECK(f.live("p").lease_deadline == Approx(f.now + 120));
}

TEST_CASE("job queue: a lease past its deadline is requeued with attempt + 1 and leased again", "[broker][job_queue]") {
  Fixture f;
  f.submit("a");
  f.add_worker("w1");
  f.queue->dispatch();
  REQUIRE(f.rec.delivered.size() == 1);

  f.advance(29);
  f.queue->check_timers();
  CHECK(f.live("a").leased);  // not yet
  CHECK(f.counters().requeued == 0);

  f.advance(2);
  f.queue->check_timers();
  CHECK_FALSE(f.live("a").leased);
  CHECK(f.live("a").attempt == 2);
  CHECK(f.state_of("a") == JobState::kQueued);
  CHECK(f.attempt_of("a") == 2);
  CHECK(f.queue->table().get("a")->error == "deadline passed");
  CHECK(f.queue->worker("iw1")->leased.empty());  // the slot is free again
  CHECK(f.counters().requeued == 1);
  CHECK(f.rec.saw("a queued 2"));

  f.queue->dispatch();
  REQUIRE(f.rec.delivered.size() == 2);
  CHECK(f.rec.delivered[1].second.job_id == "a");
  CHECK(f.rec.delivered[1].second.attempt == 2);
}

TEST_CASE("job queue: a job completed dead counts as dead, not as completed", "[broker][job_queue]") {
  Fixture f;
  f.submit("c1/p1:compile");
  f.add_worker("w1");
  f.queue->dispatch();
  REQUIRE(f.rec.delivered.size() == 1);
  proto::DeadLetter dl;
  dl.job_id = "c1/p1:compile";
  dl.worker_retry = true;
  REQUIRE(f.queue
              ->complete("c1/p1:compile", JobState::kDead, "", "task package: no task.yaml",
                         {proto::follow_up("score", proto::job_id::dead_letter("c1/p1:compile"), proto::encode(dl))})
              .is_ok());
  CHECK(f.state_of("c1/p1:compile") == JobState::kDead);
  CHECK(f.rec.saw("c1/p1:compile dead 1"));
  CHECK(f.counters().dead == 1);
  CHECK(f.counters().completed == 0);
  CHECK(f.queue->jobs().count("dead:c1/p1:compile") == 1);  // the scorer is told
}

TEST_CASE("job queue: a RESULT is a worker's dead letter only with the DeadLetter for its own job",
          "[broker][job_queue]") {
  proto::ResultMsg r;
  r.job_id = "c1/p1:compile";
  r.outcome = "failed";
  CHECK_FALSE(proto::is_worker_dead_letter(r));  // failed, nobody told
  r.next.push_back(proto::follow_up("score", "c1/p1:score", "verdict"));
  CHECK_FALSE(proto::is_worker_dead_letter(r));  // the candidate's verdict
  r.next.push_back(proto::follow_up("score", "dead:c1/p2:compile", "letter"));
  CHECK_FALSE(proto::is_worker_dead_letter(r));  // another job's
  r.next.push_back(proto::follow_up("compile", "dead:c1/p1:compile", "letter"));
  CHECK_FALSE(proto::is_worker_dead_letter(r));  // not for the scorer
  r.next.push_back(proto::follow_up("score", "dead:c1/p1:compile", "letter"));
  CHECK(proto::is_worker_dead_letter(r));
  r.outcome = "ok";
  CHECK_FALSE(proto::is_worker_dead_letter(r));
}

TEST_CASE("job queue: past max_attempts a job is dead-lettered and the scorer is told", "[broker][job_queue]") {
  Fixture f(/*max_attempts=*/2);
  f.submit("c1/p1:compile");
  f.add_worker("w1");
  for (int attempt = 1; attempt <= 2; ++attempt) {
    f.queue->dispatch();
    REQUIRE(f.rec.delivered.size() == static_cast<size_t>(attempt));
    CHECK(f.rec.delivered.back().second.attempt == attempt);
    f.advance(31);
    f.queue->check_timers();
  }
  CHECK(f.queue->jobs().count("c1/p1:compile") == 0);
  CHECK(f.state_of("c1/p1:compile") == JobState::kDead);
  CHECK(f.queue->table().get("c1/p1:compile")->error == "dead after 2 attempts: deadline passed");
  CHECK(f.counters().dead == 1);
  CHECK(f.counters().requeued == 1);
  CHECK(f.rec.saw("c1/p1:compile dead 2"));

  // The dead letter waits for the scorer, with the job's payload and why it died.
  const broker::LiveJob& letter = f.live("dead:c1/p1:compile");
  CHECK(letter.service == "score");
  auto dl = proto::decode<proto::DeadLetter>(letter.payload);
  REQUIRE(dl.is_ok());
  CHECK(dl->job_id == "c1/p1:compile");
  CHECK(dl->service == "compile");
  CHECK(dl->attempts == 2);
  CHECK(dl->reason == "deadline passed");
  CHECK(dl->payload.data == "payload of c1/p1:compile");
  CHECK_FALSE(dl->worker_retry);
  CHECK(f.rec.saw("dead:c1/p1:compile queued 1"));
}

TEST_CASE("job queue: a worker's own retry counts as an attempt and is named in the dead letter",
          "[broker][job_queue]") {
  Fixture f(/*max_attempts=*/1);
  f.submit("a");
  f.add_worker("w1");
  f.queue->dispatch();
  REQUIRE(f.queue->end_lease("iw1", "a", 1) == JobQueue::LeaseEnd::kEnded);
  f.queue->requeue("a", "worker asked to retry: no toolchain", /*worker_retry=*/true);
  CHECK(f.state_of("a") == JobState::kDead);
  auto dl = proto::decode<proto::DeadLetter>(f.live("dead:a").payload);
  REQUIRE(dl.is_ok());
  CHECK(dl->worker_retry);
  CHECK(dl->reason == "worker asked to retry: no toolchain");
}

TEST_CASE("job queue: a dead score job gets no dead letter", "[broker][job_queue]") {
  Fixture f(/*max_attempts=*/1);
  f.submit("c1:start", "score");
  f.add_worker("s1", "score");
  f.queue->dispatch();
  f.advance(61);
  f.queue->check_timers();
  CHECK(f.state_of("c1:start") == JobState::kDead);
  CHECK(f.queue->jobs().empty());
}

TEST_CASE("job queue: a result for a stale lease is dropped and changes nothing", "[broker][job_queue]") {
  Fixture f;
  f.submit("a");
  f.add_worker("w1");
  f.add_worker("w2");
  f.queue->dispatch();
  REQUIRE(f.rec.delivered.size() == 1);
  const std::string first = f.rec.delivered[0].first;
  const std::string second = first == "iw1" ? "iw2" : "iw1";
  f.advance(31);
  f.queue->check_timers();  // attempt 1 is over
  f.queue->dispatch();
  REQUIRE(f.rec.delivered.size() == 2);
  REQUIRE(f.live("a").attempt == 2);
  const std::string holder = f.rec.delivered[1].first;

  // Attempt 1's answer comes late: from its worker, and with its attempt number.
  CHECK(f.queue->end_lease(first, "a", 1) == JobQueue::LeaseEnd::kLate);
  CHECK(f.queue->end_lease(holder, "a", 1) == JobQueue::LeaseEnd::kLate);
  CHECK(f.queue->end_lease(holder == first ? second : first, "a", 2) == JobQueue::LeaseEnd::kLate);
  CHECK(f.queue->end_lease("ignone", "a", 2) == JobQueue::LeaseEnd::kUnknownWorker);
  CHECK(f.queue->end_lease(holder, "no-such-job", 1) == JobQueue::LeaseEnd::kLate);
  CHECK(f.counters().late_results == 5);
  CHECK(f.live("a").leased);
  CHECK(f.live("a").worker == holder);
  CHECK(f.queue->worker(holder)->leased.count("a") == 1);
  CHECK(f.state_of("a") == JobState::kLeased);

  // The current one is taken.
  CHECK(f.queue->end_lease(holder, "a", 2) == JobQueue::LeaseEnd::kEnded);
  CHECK(f.queue->worker(holder)->leased.empty());
  REQUIRE(f.queue->complete("a", JobState::kDone, "result", "", {}).is_ok());
  CHECK(f.state_of("a") == JobState::kDone);
  CHECK(f.counters().completed == 1);
}

TEST_CASE("job queue: a completion queues its follow-ups, duplicates dropped, and they flow on",
          "[broker][job_queue]") {
  Fixture f;
  f.submit("c1/p1:propose", "propose");
  f.submit("c1/p0:compile");  // a follow-up below names it again: a duplicate
  f.add_worker("l1", "propose");
  f.queue->dispatch();
  REQUIRE(f.queue->end_lease("il1", "c1/p1:propose", 1) == JobQueue::LeaseEnd::kEnded);
  std::vector<proto::FollowUp> next = {
      {"compile", "c1/p1:compile", proto::Bytes{"candidate"}, 0, ""},
      {"score", "c1/p1:noted", proto::Bytes{"note"}, 0, ""},
      {"compile", "c1/p0:compile", proto::Bytes{"again"}, 0, ""},
  };
  REQUIRE(f.queue->complete("c1/p1:propose", JobState::kDone, "proposal", "", next).is_ok());
  CHECK(f.state_of("c1/p1:propose") == JobState::kDone);
  CHECK(f.queue->jobs().count("c1/p1:propose") == 0);
  CHECK(f.live("c1/p1:compile").payload == "candidate");
  CHECK(f.live("c1/p1:noted").service == "score");
  CHECK(f.live("c1/p0:compile").payload == "payload of c1/p0:compile");  // the original, untouched
  CHECK(f.counters().duplicate_followups == 1);
  CHECK(f.counters().completed == 1);
  CHECK(f.rec.saw("c1/p1:propose done 1"));
  CHECK(f.rec.saw("c1/p1:compile queued 1"));

  // The follow-up is a job like any other: a compiler takes it.
  f.add_worker("k1", "compile", 2);
  f.queue->dispatch();
  std::set<std::string> leased;
  for (const auto& [who, job] : f.rec.delivered)
    if (who == "ik1") leased.insert(job.job_id);
  CHECK(leased == std::set<std::string>{"c1/p0:compile", "c1/p1:compile"});

  // A failed job is recorded as failed, and queues its follow-ups all the same.
  REQUIRE(f.queue->end_lease("ik1", "c1/p1:compile", 1) == JobQueue::LeaseEnd::kEnded);
  REQUIRE(f.queue
              ->complete("c1/p1:compile", JobState::kFailed, "", "build failed",
                         {{"score", "c1/p1:built", proto::Bytes{"log"}, 0, ""}})
              .is_ok());
  CHECK(f.state_of("c1/p1:compile") == JobState::kFailed);
  CHECK(f.queue->table().get("c1/p1:compile")->error == "build failed");
  CHECK(f.queue->jobs().count("c1/p1:built") == 1);
}

TEST_CASE("job queue: a completion the table cannot record puts the job back, its follow-ups not queued",
          "[broker][job_queue]") {
  Fixture f;
  f.submit("a");
  f.add_worker("w1");
  f.queue->dispatch();
  REQUIRE(f.queue->end_lease("iw1", "a", 1) == JobQueue::LeaseEnd::kEnded);
  bool full = true;
  f.queue->table().set_write_fault(
      [&](std::string_view op) { return full && op == "complete" ? resource_exhausted("disk full") : Status::ok(); });
  CHECK_FALSE(
      f.queue->complete("a", JobState::kDone, "r", "", {{"score", "a:next", proto::Bytes{"x"}, 0, ""}}).is_ok());
  CHECK(f.queue->jobs().count("a:next") == 0);
  CHECK(f.live("a").attempt == 2);
  CHECK_FALSE(f.live("a").leased);
  CHECK(f.counters().store_write_failures == 1);
  CHECK(f.counters().requeued == 1);
  CHECK(f.counters().completed == 0);

  // A dead letter that cannot be written waits in memory and is written once the table takes writes.
  f.queue->requeue("a", "deadline passed");
  f.queue->requeue("a", "deadline passed");  // attempt 3 -> dead, but the write fails
  CHECK(f.queue->jobs().count("a") == 0);
  CHECK(f.counters().dead == 0);
  CHECK_FALSE(f.counters().store_writable);  // new jobs are refused meanwhile
  f.queue->check_timers();                   // still full
  CHECK(f.counters().dead == 0);
  full = false;
  f.queue->check_timers();
  CHECK(f.counters().dead == 1);
  CHECK(f.state_of("a") == JobState::kDead);
  CHECK(f.queue->jobs().count("dead:a") == 1);
  CHECK(f.counters().store_writable);
}

TEST_CASE("job queue: a silent worker is removed and its jobs requeued, the others are kept", "[broker][job_queue]") {
  Fixture f;
  f.submit("a");
  f.submit("b");
  f.add_worker("w1");
  f.add_worker("w2");
  f.queue->dispatch();
  REQUIRE(f.rec.delivered.size() == 2);
  f.now += 3;
  f.queue->heard_from("iw2");  // w1 stays silent
  f.now += 2;                  // w1: 5 s > 4 intervals of 1 s; w2: 2 s
  f.queue->check_timers();
  CHECK(f.queue->worker("iw1") == nullptr);
  CHECK(f.queue->worker("iw2") != nullptr);
  CHECK(f.rec.removed == std::vector<std::string>{"iw1"});
  const std::string lost_job =
      f.rec.delivered[0].first == "iw1" ? f.rec.delivered[0].second.job_id : f.rec.delivered[1].second.job_id;
  CHECK(f.live(lost_job).attempt == 2);
  CHECK_FALSE(f.live(lost_job).leased);
  CHECK(f.queue->table().get(lost_job)->error == "worker lost: silent for 4.0 s (w1)");
  CHECK(f.queue->services().at("compile").workers == std::vector<std::string>{"iw2"});
}

TEST_CASE("job queue: a worker that cannot be reached gives its job back at once", "[broker][job_queue]") {
  Fixture f;
  f.submit("a");
  f.add_worker("w1");
  f.rec.unreachable.insert("iw1");
  f.queue->dispatch();
  CHECK(f.queue->worker("iw1") == nullptr);
  CHECK(f.live("a").attempt == 2);
  CHECK_FALSE(f.live("a").leased);
  f.add_worker("w2");
  f.queue->dispatch();
  REQUIRE(f.rec.delivered.size() == 1);
  CHECK(f.rec.delivered[0].first == "iw2");
  CHECK(f.rec.delivered[0].second.attempt == 2);
}

TEST_CASE("job queue: a broken result releases only a job leased to its sender", "[broker][job_queue]") {
  Fixture f;
  f.submit("a");
  f.add_worker("w1");
  f.add_worker("w2");
  f.queue->dispatch();
  const std::string holder = f.rec.delivered.at(0).first;
  const std::string other = holder == "iw1" ? "iw2" : "iw1";
  CHECK_FALSE(f.queue->release(other, "a", "result refused: garbage"));
  CHECK(f.live("a").leased);
  CHECK(f.queue->release(holder, "a", "result refused: garbage"));
  CHECK(f.live("a").attempt == 2);
  CHECK(f.queue->worker(holder)->leased.empty());
}

TEST_CASE("job queue: a re-registration gives back the old leases, and workers past max_workers are refused",
          "[broker][job_queue]") {
  Fixture f;  // max_workers 3
  f.submit("a");
  f.add_worker("w1");
  f.queue->dispatch();
  REQUIRE(f.live("a").leased);
  f.add_worker("w1");  // the same connection registers again
  CHECK(f.live("a").attempt == 2);
  CHECK_FALSE(f.live("a").leased);
  CHECK(f.queue->workers().size() == 1);
  f.add_worker("w2");
  f.add_worker("w3");
  broker::Worker w4;
  w4.identity = "iw4";
  w4.service = "compile";
  w4.worker_id = "w4";
  Status st = f.queue->add_worker(w4);
  CHECK(st.code() == StatusCode::kResourceExhausted);
  CHECK(f.queue->worker("iw4") == nullptr);
}

TEST_CASE("job queue: a job that avoids a worker goes to another one with the same device", "[broker][job_queue]") {
  Fixture f;
  f.add_worker("t1", "test.cuda", 1, "NVIDIA H200");
  f.add_worker("t2", "test.cuda", 1, "NVIDIA A100");
  f.add_worker("t3", "test.cuda", 1, "NVIDIA H200");
  f.submit("p:test", "test.cuda");
  f.queue->dispatch();
  REQUIRE(f.queue->end_lease(f.rec.delivered.at(0).first, "p:test", 1) == JobQueue::LeaseEnd::kEnded);
  REQUIRE(f.queue->complete("p:test", JobState::kDone, "", "", {{"test.cuda", "p:confirm", proto::Bytes{"x"}, 0, "t1"}})
              .is_ok());
  f.queue->dispatch();
  REQUIRE(f.rec.delivered.size() == 2);
  CHECK(f.rec.delivered[1].second.job_id == "p:confirm");
  CHECK(f.rec.delivered[1].first == "it3");  // not t1, not the other model
}

// A confirmation names the device model of its first measurement (FollowUp::device).
void queue_confirmation(Fixture& f, const std::string& device, const std::string& avoid) {
  f.submit("p:test", "test.cuda");
  f.queue->dispatch();
  const std::string holder = f.rec.delivered.back().first;
  REQUIRE(f.queue->end_lease(holder, "p:test", 1) == JobQueue::LeaseEnd::kEnded);
  proto::FollowUp confirm{"test.cuda", "p:confirm", proto::Bytes{"x"}, 0, avoid, device};
  REQUIRE(f.queue->complete("p:test", JobState::kDone, "", "", {confirm}).is_ok());
}

TEST_CASE("job queue: a job that names a device model never goes to another model, even when it is alone",
          "[broker][job_queue]") {
  Fixture f;
  f.add_worker("t1", "test.cuda", 1, "NVIDIA H200");
  queue_confirmation(f, "NVIDIA H200", "t1");
  f.queue->remove_worker("it1", "gone");
  f.add_worker("t2", "test.cuda", 4, "NVIDIA H20");
  f.queue->dispatch();
  CHECK(f.rec.delivered.size() == 1);  // the H20 is idle, and the confirmation waits
  CHECK_FALSE(f.live("p:confirm").leased);
  // Its first tester again, with no other H200 connected: it takes it (same model).
  f.add_worker("t1", "test.cuda", 1, "NVIDIA H200");
  f.queue->dispatch();
  REQUIRE(f.rec.delivered.size() == 2);
  CHECK(f.rec.delivered[1].first == "it1");
  CHECK(f.rec.delivered[1].second.job_id == "p:confirm");
}

TEST_CASE("job queue: a job whose device model no worker has ends unrun after device_wait_s, saying why",
          "[broker][job_queue]") {
  Fixture f;
  f.opt.device_wait_s = 600;
  f.add_worker("t1", "test.cuda", 1, "NVIDIA H200");
  f.add_worker("t2", "test.cuda", 1, "NVIDIA A100");
  queue_confirmation(f, "NVIDIA H200", "t1");
  f.queue->remove_worker("it1", "gone");
  f.queue->dispatch();
  f.queue->check_timers();  // the wait starts
  f.advance(400);
  f.queue->check_timers();
  // An H200 tester comes and goes: the wait starts over.
  f.add_worker("t3", "test.cuda", 1, "NVIDIA H200");
  f.queue->check_timers();
  f.queue->remove_worker("it3", "gone");
  f.queue->check_timers();
  f.advance(400);
  f.queue->check_timers();
  REQUIRE(f.state_of("p:confirm") == JobState::kQueued);
  f.advance(201);
  f.queue->check_timers();
  f.queue->dispatch();
  CHECK(f.state_of("p:confirm") == JobState::kDead);
  CHECK(f.queue->jobs().count("p:confirm") == 0);
  CHECK(f.queue->services().at("test.cuda").queued.empty());
  auto row = f.queue->table().get("p:confirm");
  REQUIRE(row.is_ok());
  CHECK(row->error.find("no worker of 'test.cuda' on 'NVIDIA H200' was connected for 600 s") != std::string::npos);
  // The scorer is told it was not run, not that the candidate failed.
  auto letter = f.queue->jobs().find(proto::job_id::dead_letter("p:confirm"));
  REQUIRE(letter != f.queue->jobs().end());
  auto dl = proto::decode<proto::DeadLetter>(letter->second.payload);
  REQUIRE(dl.is_ok());
  CHECK(dl->worker_retry);
  CHECK(dl->reason.find("NVIDIA H200") != std::string::npos);
  CHECK(f.rec.delivered.size() == 1);  // the A100 never got it
}

TEST_CASE("job queue: device_wait_s 0 waits for ever, and a restart keeps the device a job needs",
          "[broker][job_queue]") {
  Fixture f;
  f.opt.device_wait_s = 0;
  f.add_worker("t1", "test.cuda", 1, "NVIDIA H200");
  queue_confirmation(f, "NVIDIA H200", "t1");
  f.queue->remove_worker("it1", "gone");
  for (int i = 0; i < 5; ++i) {
    f.advance(100000);
    f.queue->check_timers();
  }
  CHECK(f.state_of("p:confirm") == JobState::kQueued);
  auto active = f.queue->table().load_active();
  REQUIRE(active.is_ok());
  auto it = std::find_if(active->begin(), active->end(), [](const JobRow& r) { return r.id == "p:confirm"; });
  REQUIRE(it != active->end());
  CHECK(it->device == "NVIDIA H200");
  CHECK(it->avoid_worker == "t1");
}

TEST_CASE("job queue: a restart requeues the leased jobs of the previous run", "[broker][job_queue]") {
  Fixture f;
  f.submit("a");
  f.submit("b");
  f.add_worker("w1");
  f.queue->dispatch();
  REQUIRE(f.state_of("a") == JobState::kLeased);
  auto active = f.queue->table().load_active();
  REQUIRE(active.is_ok());

  auto table = broker::JobTable::open(f.dir.path() + "/broker.db");
  REQUIRE(table.is_ok());
  prometheus::Registry registry;
  broker::BrokerMetrics metrics(registry);
  JobQueue restarted(std::move(table).value(), f.opt, metrics, [&] { return f.now; });
  CHECK(restarted.resume(std::move(active).value()) == 1);
  CHECK(restarted.jobs().size() == 2);
  CHECK_FALSE(restarted.jobs().at("a").leased);
  CHECK(restarted.table().get("a")->state == JobState::kQueued);
  CHECK(restarted.services().at("compile").queued.size() == 2);
}

TEST_CASE("job queue: submits are idempotent and service names are bounded", "[broker][job_queue]") {
  Fixture f;
  f.submit("a");
  JobRow again;
  again.id = "a";
  again.service = "compile";
  auto dup = f.queue->submit(again);
  REQUIRE(dup.is_ok());
  CHECK_FALSE(*dup);
  CHECK(f.counters().duplicate_submits == 1);
  CHECK(f.queue->services().at("compile").queued.size() == 1);

  CHECK(f.queue->admit_service("compile").is_ok());
  CHECK(f.queue->admit_service("bad name").code() == StatusCode::kInvalidArgument);
  CHECK(f.queue->admit_service(std::string(65, 'x')).code() == StatusCode::kInvalidArgument);
  for (size_t i = 0; i < JobQueue::kMaxServices; ++i) f.submit("j" + std::to_string(i), "custom" + std::to_string(i));
  CHECK(f.queue->admit_service("custom7").is_ok());  // one it has
  CHECK(f.queue->admit_service("score").is_ok());    // a known one, always
  // Names nobody serves share one label; a served one gets its own.
  CHECK(f.queue->service_label("custom7") == std::string(JobQueue::kOtherServiceLabel));
  f.add_worker("c7", "custom7");
  CHECK(f.queue->service_label("custom7") == "custom7");
}

TEST_CASE("job queue: the slots of services no worker serves are taken back when a new one needs one",
          "[broker][job_queue]") {
  Fixture f;
  f.opt.max_workers = 1000;
  const size_t n = JobQueue::kMaxServices;
  // Workers that came and went leave idle queues: dropped first, with their series.
  for (size_t i = 0; i < n; ++i) {
    f.add_worker("w" + std::to_string(i), "gone" + std::to_string(i));
    f.queue->remove_worker("iw" + std::to_string(i), "test");
  }
  CHECK(f.queue->services().size() == n);
  REQUIRE(f.queue->admit_service("fresh").is_ok());
  CHECK(f.queue->services().empty());
  for (const auto& family : f.registry.Collect())
    for (const auto& m : family.metric)
      for (const auto& l : m.label) CHECK_FALSE(l.value.starts_with("gone"));

  // Queues with jobs and no worker: the one untouched longest has its jobs failed and gives its slot.
  for (size_t i = 0; i < n; ++i) f.submit("j" + std::to_string(i), "q" + std::to_string(i));
  f.submit("j0b", "q0");  // q0 touched again: q1 is now the oldest
  f.add_worker("s2", "q2");
  REQUIRE(f.queue->admit_service("late").is_ok());
  f.submit("jl", "late");
  CHECK(f.state_of("j1") == JobState::kFailed);
  CHECK(f.queue->table().get("j1")->error.find("no worker served 'q1'") != std::string::npos);
  CHECK(f.rec.saw("j1 failed 1"));
  CHECK(f.queue->services().count("q1") == 0);
  CHECK(f.state_of("j0") == JobState::kQueued);
  CHECK(f.state_of("j3") == JobState::kQueued);
  CHECK(f.queue->jobs().count("j1") == 0);

  // Every other service with a worker: nothing to take back.
  Fixture g;
  g.opt.max_workers = 1000;
  for (size_t i = 0; i < n; ++i) g.add_worker("w" + std::to_string(i), "busy" + std::to_string(i));
  CHECK(g.queue->admit_service("one.more").code() == StatusCode::kResourceExhausted);
  CHECK(g.queue->admit_service("compile").is_ok());
}
