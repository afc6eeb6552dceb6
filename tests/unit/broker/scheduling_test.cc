// The order in which a service's queue hands jobs out (fair_queue.h): a higher priority first; within one,
// campaigns take turns; within a campaign, first in first out; jobs of no campaign FIFO as before. Then
// the same through the job queue: a worker with one slot takes the jobs of three campaigns in turns, a
// priority submitted goes first, and follow-ups keep their campaign's place.
#include <catch2/catch.hpp>
#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/broker/broker.h"
#include "kiln/broker/fair_queue.h"
#include "kiln/broker/job_queue.h"
#include "kiln/core/files.h"
#include "kiln/messaging/client.h"

using namespace kiln;
using broker::FairQueue;

namespace {

std::vector<std::string> drain(FairQueue& q) {
  std::vector<std::string> order;
  while (auto id = q.take(64, [](const std::string&) { return true; })) order.push_back(*id);
  return order;
}

using Ids = std::vector<std::string>;

// Records the jobs delivered, in order.
struct Deliveries : broker::QueueListener {
  std::vector<std::string> ids;
  void job_state(const std::string&, const std::string&, std::string_view, int) override {}
  void deliver(const std::string&, const proto::Job& job) override { ids.push_back(job.job_id); }
  void worker_removed(const std::string&) override {}
};

struct Fixture {
  TempDir dir{"kiln-scheduling"};
  broker::BrokerOptions opt;
  prometheus::Registry registry;
  broker::BrokerMetrics metrics{registry};
  std::unique_ptr<broker::JobQueue> queue;
  Deliveries rec;
  double now = 1000;

  Fixture() {
    auto table = broker::JobTable::open(dir.path() + "/broker.db");
    REQUIRE(table.is_ok());
    queue = std::make_unique<broker::JobQueue>(std::move(table).value(), opt, metrics, [this] { return now; });
    queue->set_listener(&rec);
    broker::Worker w;
    w.identity = "iw";
    w.service = "compile";
    w.worker_id = "w";
    w.slots = 1;
    REQUIRE(queue->add_worker(std::move(w)).is_ok());
  }
  void submit(const std::string& id, const std::string& campaign, int64_t priority = 0) {
    broker::JobRow row;
    row.id = id;
    row.service = "compile";
    row.campaign = campaign;
    row.priority = priority;
    REQUIRE(queue->submit(row).value());
  }
  // Leases the next job to the one worker and completes it with `next` as its follow-ups: its id.
  std::string run_next(const std::vector<proto::FollowUp>& next = {}) {
    const size_t before = rec.ids.size();
    queue->dispatch();
    REQUIRE(rec.ids.size() == before + 1);
    const std::string id = rec.ids.back();
    REQUIRE(queue->end_lease("iw", id, 1) == broker::JobQueue::LeaseEnd::kEnded);
    REQUIRE(queue->complete(id, broker::JobState::kDone, "", "", next).is_ok());
    return id;
  }
};

// A broker on loopback, for what a SUBMIT carries.
struct RunningBroker {
  TempDir dir{"kiln-scheduling-broker"};
  zmq::context_t ctx{1};
  std::unique_ptr<broker::Broker> broker;
  std::atomic<bool> stop{false};
  std::thread thread;

  RunningBroker() {
    broker::BrokerOptions opt;
    opt.bind = "tcp://127.0.0.1:*";
    opt.db_path = dir.path() + "/broker.db";
    auto b = broker::Broker::create(ctx, opt, std::make_shared<prometheus::Registry>());
    REQUIRE(b.is_ok());
    broker = std::move(b).value();
    thread = std::thread([this] { broker->run(stop); });
  }
  ~RunningBroker() {
    stop = true;
    thread.join();
  }
};

}  // namespace

TEST_CASE("fair queue: removing one job keeps the others' order and turns", "[broker][scheduling]") {
  FairQueue q;
  q.push("a1", 0, "a");
  q.push("a2", 0, "a");
  q.push("b1", 0, "b");
  q.push("h1", 5, "h");
  CHECK_FALSE(q.remove("a1", 5, "a"));  // another priority
  CHECK_FALSE(q.remove("zz", 0, "a"));
  CHECK(q.remove("h1", 5, "h"));  // its level goes with it
  CHECK(q.remove("a1", 0, "a"));
  CHECK(q.size() == 2);
  CHECK(drain(q) == Ids{"a2", "b1"});
  q.push("b2", 0, "b");
  CHECK(q.remove("b2", 0, "b"));  // its campaign leaves the rotation
  CHECK(q.empty());
  CHECK(drain(q).empty());
}

TEST_CASE("fair queue: campaigns take turns, each FIFO, in the order they joined", "[broker][scheduling]") {
  FairQueue q;
  for (const char* id : {"a1", "a2", "a3", "a4"}) q.push(id, 0, "a");
  for (const char* id : {"b1", "b2"}) q.push(id, 0, "b");
  q.push("c1", 0, "c");
  CHECK(q.size() == 7);
  CHECK(q.peek(7) == Ids{"a1", "b1", "c1", "a2", "b2", "a3", "a4"});
  CHECK(drain(q) == Ids{"a1", "b1", "c1", "a2", "b2", "a3", "a4"});
  CHECK(q.empty());
}

TEST_CASE("fair queue: a higher priority goes first, and jobs of no campaign stay FIFO", "[broker][scheduling]") {
  FairQueue q;
  q.push("x1", 0, "");
  q.push("a1", 0, "a");
  q.push("x2", 0, "");
  q.push("u1", 5, "urgent");
  q.push("x3", 0, "");
  q.push("u2", 5, "urgent");
  q.push("low", -1, "");
  CHECK(drain(q) == Ids{"u1", "u2", "x1", "a1", "x2", "x3", "low"});

  FairQueue fifo;
  for (const char* id : {"j1", "j2", "j3"}) fifo.push(id, 0, "");
  CHECK(drain(fifo) == Ids{"j1", "j2", "j3"});
}

TEST_CASE("fair queue: a campaign served goes to the back, one that joins later waits its turn",
          "[broker][scheduling]") {
  FairQueue q;
  q.push("a1", 0, "a");
  q.push("a2", 0, "a");
  q.push("b1", 0, "b");
  CHECK(q.take(64, [](const std::string&) { return true; }) == "a1");  // a goes behind b
  q.push("c1", 0, "c");                                                // c joins behind a
  q.push("a3", 0, "a");
  CHECK(drain(q) == Ids{"b1", "a2", "c1", "a3"});
}

TEST_CASE("fair queue: a job the worker may not take is skipped, within the scan", "[broker][scheduling]") {
  FairQueue q;
  q.push("a1", 0, "a");
  q.push("b1", 0, "b");
  q.push("a2", 0, "a");
  auto not_a1 = [](const std::string& id) { return id != "a1"; };
  CHECK(q.take(64, not_a1) == "b1");
  CHECK(q.take(1, not_a1) == std::nullopt);  // a1 is the only one scanned
  CHECK(q.take(64, not_a1) == "a2");
  CHECK(q.take_all() == Ids{"a1"});
}

TEST_CASE("job queue: three campaigns submitted together share one worker in turns", "[broker][scheduling]") {
  Fixture f;
  // Campaign a submits its four jobs first, as a campaign with more in flight does.
  for (const char* id : {"a1", "a2", "a3", "a4"}) f.submit(id, "a");
  for (const char* id : {"b1", "b2"}) f.submit(id, "b");
  for (const char* id : {"c1", "c2"}) f.submit(id, "c");
  std::vector<std::string> order;
  for (int i = 0; i < 8; ++i) order.push_back(f.run_next());
  CHECK(order == Ids{"a1", "b1", "c1", "a2", "b2", "c2", "a3", "a4"});
}

TEST_CASE("job queue: a campaign submitted with a priority goes first, and so do its follow-ups",
          "[broker][scheduling]") {
  Fixture f;
  for (const char* id : {"a1", "a2", "a3"}) f.submit(id, "a");
  f.submit("u:start", "u", 10);
  // The urgent campaign's first job makes a follow-up; it inherits priority 10 and overtakes a's jobs.
  CHECK(f.run_next({{"compile", "u:next", {"n"}, 0, ""}}) == "u:start");
  CHECK(f.run_next() == "u:next");
  CHECK(f.run_next() == "a1");
}

TEST_CASE("broker: a SUBMIT's priority and campaign reach the job table, and out-of-range ones are refused",
          "[broker][scheduling]") {
  RunningBroker b;
  messaging::Client client(b.ctx, b.broker->endpoint());
  proto::Submit sub{"compile", "ingest:c9", proto::Bytes{"x"}, 0};
  sub.priority = 7;
  sub.campaign = "c9";
  auto ack = client.submit(sub, 10.0);
  REQUIRE(ack.is_ok());
  CHECK(ack->accepted);

  sub.job_id = "too-high";
  sub.priority = proto::kMaxPriority + 1;
  auto high = client.submit(sub, 10.0);
  REQUIRE(high.is_ok());
  CHECK_FALSE(high->accepted);
  CHECK(high->error == "priority 1001 is outside -1000..1000");

  sub.job_id = "bad-campaign";
  sub.priority = 0;
  sub.campaign = "a:b";
  auto bad = client.submit(sub, 10.0);
  REQUIRE(bad.is_ok());
  CHECK_FALSE(bad->accepted);
  CHECK(bad->error.find("the campaign is not a campaign id") == 0);

  auto table = broker::JobTable::open(b.dir.path() + "/broker.db");
  REQUIRE(table.is_ok());
  auto active = table->load_active();
  REQUIRE(active.is_ok());
  REQUIRE(active->size() == 1);
  CHECK(active->front().id == "ingest:c9");
  CHECK(active->front().priority == 7);
  CHECK(active->front().campaign == "c9");
}
