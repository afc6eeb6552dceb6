// The broker's CURVE endpoint for external bridges (DESIGN §2): the ZAP allowlist, its reload, and what a
// bridge may do once admitted. Real sockets on loopback; workers of the messaging library with CURVE keys.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "kiln/broker/allowlist.h"
#include "kiln/broker/broker.h"
#include "kiln/core/files.h"
#include "kiln/core/time.h"
#include "kiln/messaging/client.h"
#include "kiln/messaging/curve.h"
#include "kiln/messaging/worker.h"
#include "kiln/proto/payloads.h"

using namespace kiln;
using namespace std::chrono_literals;

namespace {

constexpr const char* kService = "propose.external";

template <class F>
bool wait_until(F pred, double timeout_s = 10) {
  double until = monotonic_s() + timeout_s;
  while (monotonic_s() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

messaging::CurveKeyPair new_keys() {
  auto k = messaging::generate_curve_keypair();
  REQUIRE(k.is_ok());
  return *k;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// A broker with its external endpoint on, serving on its own thread. reload is the SIGHUP flag.
struct BridgeBroker {
  TempDir dir{"kiln-bridge-test"};
  zmq::context_t ctx{1};
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  messaging::CurveKeyPair server = new_keys();
  std::string allowlist = dir.path() + "/bridges.allow";
  std::unique_ptr<broker::Broker> broker;
  std::atomic<bool> stop{false};
  std::atomic<bool> reload{false};
  std::thread thread;

  explicit BridgeBroker(const std::string& allowlist_text) {
    write_text(allowlist, allowlist_text);
    broker::BrokerOptions opt;
    opt.bind = "tcp://127.0.0.1:*";
    opt.external_bind = "tcp://127.0.0.1:*";
    opt.curve_secret_key = server.secret_key;
    opt.allowlist_path = allowlist;
    opt.db_path = dir.path() + "/broker.db";
    opt.heartbeat_interval_s = 0.1;
    opt.heartbeat_liveness = 5;
    opt.max_message_bytes = 1 << 20;
    opt.lease_timeout_s = {{"default", 60}, {"propose", 300}};  // as configs/kiln.yaml
    auto b = broker::Broker::create(ctx, opt, registry);
    INFO((b.is_ok() ? std::string() : b.status().message()));
    REQUIRE(b.is_ok());
    broker = std::move(b).value();
    thread = std::thread([this] { broker->run(stop, &reload); });
  }
  ~BridgeBroker() {
    stop = true;
    thread.join();
  }
  // Applies a new allowlist as SIGHUP would, and waits for the loop to have read it.
  void replace_allowlist(const std::string& text) {
    int64_t before = broker->counters().allowlist_reloads;
    write_text(allowlist, text);
    reload = true;
    REQUIRE(wait_until([&] { return broker->counters().allowlist_reloads > before; }));
  }
  messaging::CurveClientKeys client_keys(const messaging::CurveKeyPair& k) const {
    return {server.public_key, k.public_key, k.secret_key};
  }
  double metric(const std::string& name, const std::string& label_value = "") const {
    double total = 0;
    for (const auto& family : registry->Collect()) {
      if (family.name != name) continue;
      for (const auto& m : family.metric) {
        if (!label_value.empty() && (m.label.empty() || m.label[0].value != label_value)) continue;
        total += m.counter.value;
      }
    }
    return total;
  }
};

// A worker of the messaging library connecting to the external endpoint with CURVE keys.
struct Bridge {
  std::atomic<bool> stop{false};
  std::atomic<int> jobs{0};
  std::unique_ptr<messaging::Worker> worker;
  std::thread thread;
  std::atomic<double> deadline_in_s{0};  // the lease of the last job, as the JOB's deadline says
  Bridge(BridgeBroker& b, const messaging::CurveKeyPair& keys, const std::string& service = kService,
         const std::string& followup_service = "compile") {
    messaging::WorkerOptions o;
    o.endpoint = b.broker->external_endpoint();
    o.service = service;
    o.worker_id = "bridge-test";
    o.heartbeat_interval_s = 0.1;
    o.heartbeat_liveness = 5;
    o.reconnect_min_s = 0.1;
    o.reconnect_max_s = 0.4;
    o.socket.curve = b.client_keys(keys);
    worker = std::make_unique<messaging::Worker>(b.ctx, o, [this, followup_service](const proto::Job& job) {
      ++jobs;
      deadline_in_s = job.deadline - wall_time_s();
      proto::FollowUp next{followup_service, job.job_id + ":" + followup_service,
                           proto::Bytes{"code for " + job.payload.data}, 0};
      return messaging::JobOutcome::ok({next});
    });
    thread = std::thread([this] { worker->run(stop, 1.0); });
  }
  ~Bridge() {
    stop = true;
    thread.join();
  }
};

std::string state_of(messaging::Client& c, const std::string& id) {
  auto body = c.request("broker", "job", proto::encode(proto::JobStatusQuery{id}));
  REQUIRE(body.is_ok());
  return proto::decode<proto::JobStatus>(*body).value().state;
}

void submit(messaging::Client& c, const std::string& service, const std::string& id) {
  auto ack = c.submit(proto::Submit{service, id, proto::Bytes{id}, 0});
  REQUIRE(ack.is_ok());
  REQUIRE(ack->accepted);
}

}  // namespace

TEST_CASE("an allowlisted bridge gets a job through the CURVE endpoint", "[broker][bridge]") {
  auto alice = new_keys();
  BridgeBroker b("# bridges\nalice " + alice.public_key + "  # the test agent\n");
  REQUIRE_FALSE(b.broker->external_endpoint().empty());
  Bridge bridge(b, alice);
  messaging::Client client(b.ctx, b.broker->endpoint());
  submit(client, kService, "c/p1:propose");
  REQUIRE(wait_until([&] { return state_of(client, "c/p1:propose") == "done"; }));
  CHECK(bridge.jobs == 1);
  CHECK(state_of(client, "c/p1:propose:compile") == "queued");  // its follow-up waits for a compiler
  CHECK(b.broker->counters().bridge_messages > 0);
  CHECK(b.broker->counters().bridge_auth_failures == 0);
  CHECK(b.metric("kiln_bridge_messages_total", "alice") > 0);
}

TEST_CASE("a bridge whose key is not on the list is refused and receives nothing", "[broker][bridge]") {
  auto alice = new_keys(), mallory = new_keys();
  BridgeBroker b("alice " + alice.public_key + "\n");
  messaging::Client client(b.ctx, b.broker->endpoint());
  submit(client, kService, "c/p1:propose");
  Bridge intruder(b, mallory);
  REQUIRE(wait_until([&] { return b.broker->counters().bridge_auth_failures >= 2; }));  // refused, and again
  std::this_thread::sleep_for(300ms);
  CHECK(intruder.jobs == 0);
  CHECK(b.broker->counters().bridge_messages == 0);  // not one frame got through
  CHECK(state_of(client, "c/p1:propose") == "queued");
  CHECK(b.metric("kiln_bridge_auth_failures_total") >= 2);
}

TEST_CASE("reloading the allowlist admits a new key and revokes a removed one", "[broker][bridge]") {
  auto alice = new_keys(), bob = new_keys();
  BridgeBroker b("alice " + alice.public_key + "\n");
  messaging::Client client(b.ctx, b.broker->endpoint());
  {
    Bridge late(b, bob);
    REQUIRE(wait_until([&] { return b.broker->counters().bridge_auth_failures >= 1; }));
    submit(client, kService, "c/p1:propose");
    b.replace_allowlist("alice " + alice.public_key + "\nbob " + bob.public_key + "\n");
    // bob's worker reconnects with a fresh socket after its backoff, and this time gets through.
    REQUIRE(wait_until([&] { return state_of(client, "c/p1:propose") == "done"; }));
    CHECK(late.jobs == 1);

    // Taking bob off the list cuts his open connection too: the next job is not his.
    b.replace_allowlist("alice " + alice.public_key + "\n");
    submit(client, kService, "c/p2:propose");
    std::this_thread::sleep_for(500ms);
    CHECK(late.jobs == 1);
    CHECK(state_of(client, "c/p2:propose") == "queued");
  }
  // A list that does not parse keeps the previous one (alice still gets through).
  int64_t reloads = b.broker->counters().allowlist_reloads;
  write_text(b.allowlist, "alice not-a-key\n");
  b.reload = true;
  std::this_thread::sleep_for(300ms);
  CHECK(b.broker->counters().allowlist_reloads == reloads);
  Bridge again(b, alice);
  REQUIRE(wait_until([&] { return state_of(client, "c/p2:propose") == "done"; }));
}

TEST_CASE("a broker whose allowlist does not parse starts, admits no bridge, and takes the fixed list",
          "[broker][bridge]") {
  auto alice = new_keys();
  BridgeBroker b("alice " + alice.public_key + "\nbob not-a-key\n");  // a malformed line: no list in force
  messaging::Client client(b.ctx, b.broker->endpoint());
  submit(client, kService, "c/p1:propose");
  {
    Bridge refused(b, alice);
    REQUIRE(wait_until([&] { return b.broker->counters().bridge_auth_failures >= 1; }));
    CHECK(refused.jobs == 0);
  }
  CHECK(b.broker->counters().allowlist_reloads == 0);
  b.replace_allowlist("alice " + alice.public_key + "\n");
  Bridge admitted(b, alice);
  REQUIRE(wait_until([&] { return state_of(client, "c/p1:propose") == "done"; }));
}

TEST_CASE("an admitted bridge may serve only its services and only propose code", "[broker][bridge]") {
  auto alice = new_keys();
  BridgeBroker b("alice " + alice.public_key + "\n");
  messaging::Client client(b.ctx, b.broker->endpoint());

  // It may not submit jobs (nor send requests): it is a worker, not a client.
  messaging::SocketOptions so;
  so.curve = b.client_keys(alice);
  messaging::Client as_bridge(b.ctx, b.broker->external_endpoint(), so);
  auto ack = as_bridge.submit(proto::Submit{"promote", "x:promote", proto::Bytes{"x"}, 0});
  REQUIRE(ack.is_ok());
  CHECK_FALSE(ack->accepted);
  CHECK(ack->error == "external bridges may not submit jobs");
  CHECK_FALSE(as_bridge.request("broker", "status", "").is_ok());
  CHECK(state_of(client, "x:promote") == "unknown");

  // It may not take jobs of an internal service.
  submit(client, "compile", "c/p1:compile");
  {
    Bridge wrong(b, alice, "compile");
    std::this_thread::sleep_for(400ms);
    CHECK(wrong.jobs == 0);
  }
  CHECK(state_of(client, "c/p1:compile") == "queued");
}

TEST_CASE("a bridge result the broker refuses sends its job back to the queue at once", "[broker][bridge]") {
  auto alice = new_keys();
  BridgeBroker b("alice " + alice.public_key + "\n");
  messaging::Client client(b.ctx, b.broker->endpoint());
  submit(client, kService, "c/p4:propose");
  // Its results lead to "promote", which bridges may not reach: each is refused, the job is leased again
  // with attempt + 1 at once (not after its 60 s lease), and dead after three attempts.
  Bridge rogue(b, alice, kService, "promote");
  REQUIRE(wait_until([&] { return state_of(client, "c/p4:propose") == "dead"; }));
  CHECK(rogue.jobs == 3);
  CHECK(state_of(client, "c/p4:propose:promote") == "unknown");
  CHECK(b.metric("kiln_broker_rejected_frames_total", "forbidden") == 3);
  // The bridge was told why, each time (an ACK naming the job and the reason).
  REQUIRE(wait_until([&] { return rogue.worker->stats().refusals == 3; }));
  CHECK(b.broker->counters().refused_results == 3);
}

TEST_CASE("propose.external takes the propose lease (300 s), not the default", "[broker][bridge]") {
  auto alice = new_keys();
  BridgeBroker b("alice " + alice.public_key + "\n");
  messaging::Client client(b.ctx, b.broker->endpoint());
  Bridge bridge(b, alice);
  submit(client, kService, "c/p5:propose");
  REQUIRE(wait_until([&] { return bridge.jobs == 1; }));
  CHECK(bridge.deadline_in_s > 290);
  CHECK(bridge.deadline_in_s <= 300);
}

TEST_CASE("allowlist files name the line of an error", "[broker][bridge]") {
  auto k = new_keys();
  auto ok = broker::Allowlist::parse("# comment\n\nalice " + k.public_key + " # trailing\n", "bridges.allow");
  REQUIRE(ok.is_ok());
  CHECK(ok->size() == 1);
  CHECK(ok->name_of(*messaging::decode_curve_key(k.public_key)) == "alice");
  CHECK(ok->has_name("alice"));
  CHECK_FALSE(ok->has_name("bob"));

  // '#' is a Z85 character: a key that holds one (or starts with one) is a key, not a comment.
  messaging::CurveKeyPair hashed = new_keys();
  for (int i = 0; i < 200 && hashed.public_key.find('#') == std::string::npos; ++i) hashed = new_keys();
  REQUIRE(hashed.public_key.find('#') != std::string::npos);
  auto with_hash = broker::Allowlist::parse("h " + hashed.public_key + "\n", "bridges.allow");
  REQUIRE(with_hash.is_ok());
  CHECK(with_hash->name_of(*messaging::decode_curve_key(hashed.public_key)) == "h");

  auto err = [](const std::string& text) {
    auto r = broker::Allowlist::parse(text, "bridges.allow");
    REQUIRE_FALSE(r.is_ok());
    return r.status().message();
  };
  CHECK(err("alice\n") == "bridges.allow:1: expected \"<name> <z85 public key>\", got only \"alice\"");
  CHECK(err("\nalice short\n") == "bridges.allow:2: bridge 'alice': expected a 40-character Z85 key, got 5 characters");
  CHECK(err("al/ice " + k.public_key + "\n").starts_with("bridges.allow:1: bridge name \"al/ice\" must be"));
  CHECK(err("a " + k.public_key + "\nb " + k.public_key + "\n") ==
        "bridges.allow:2: bridge 'b': the same key is already listed for 'a'");
  CHECK(err("a " + k.public_key + " extra\n") == "bridges.allow:1: unexpected text after the key: \"extra\"");

  TempDir dir("kiln-allowlist");
  auto missing = broker::Allowlist::load(dir.path() + "/none");
  REQUIRE(missing.is_ok());
  CHECK(missing->size() == 0);
}

TEST_CASE("a server key pair is created once, then read back", "[broker][bridge]") {
  TempDir dir("kiln-curve");
  std::string sec = dir.path() + "/broker.key", pub = dir.path() + "/broker.pub";
  bool created = false;
  auto first = messaging::load_or_create_curve_keypair(sec, pub, &created);
  REQUIRE(first.is_ok());
  CHECK(created);
  struct stat st {};
  REQUIRE(::stat(sec.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);  // the secret is the owner's alone
  auto again = messaging::load_or_create_curve_keypair(sec, pub, &created);
  REQUIRE(again.is_ok());
  CHECK_FALSE(created);
  CHECK(again->secret_key == first->secret_key);
  CHECK(again->public_key == first->public_key);
  CHECK(messaging::curve_public_of(first->secret_key).value() == first->public_key);
  CHECK_FALSE(messaging::write_curve_keypair(*first, sec, pub).is_ok());  // never overwritten
  write_text(pub, new_keys().public_key + "\n");
  auto mismatched = messaging::load_or_create_curve_keypair(sec, pub);
  REQUIRE_FALSE(mismatched.is_ok());
  CHECK(mismatched.status().message() == pub + ": not the public key of " + sec);
}
