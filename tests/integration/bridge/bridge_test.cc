// External bridges end to end (DESIGN §2, issue 5): the real kiln-broker with its CURVE endpoint, key
// pairs from `kiln keys new`, and clients/python/kiln_bridge.py with the scripted example agent. An
// allowlisted bridge answers a real ProposalRequest with a compile job; an unlisted one receives nothing
// until a SIGHUP reload admits it. With every service up (`kiln up`), a campaign submitted with proposer
// "external" is driven to the end by the bridge alone.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "kiln/core/files.h"
#include "kiln/messaging/client.h"
#include "kiln/messaging/worker.h"
#include "kiln/proto/payloads.h"
#include "process.h"

using namespace kiln;
using kiln::testing::Background;
using kiln::testing::bin_dir;
using kiln::testing::eventually;
using kiln::testing::run_process;
using kiln::testing::source_dir;

namespace {

// Debian's interpreter, which has python3-zmq and python3-msgpack (a pyenv shim on PATH may not).
std::string python() { return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

std::string endpoint_at(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

void append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app);
  out << text;
}

std::string json_string(const std::string& json, const std::string& key) {
  std::string k = "\"" + key + "\": \"";
  size_t b = json.find(k);
  if (b == std::string::npos) return {};
  b += k.size();
  return json.substr(b, json.find('"', b) - b);
}

proto::ProposalRequest softmax_request(const std::string& program_id, int64_t index) {
  proto::ProposalRequest req;
  std::string dir = source_dir() + "/configs/tasks/softmax";
  for (const char* name : {"task.yaml", "kernel.cpp", "reference.cpp", "instructions.md"})
    req.files[name] = proto::Bytes{read_file(dir + "/" + name).value()};
  req.parent.campaign_id = "camp";
  req.parent.program_id = "camp/p0";
  req.parent.generation = 0;
  req.parent.proposer = "program0";
  req.parent.code = req.files["kernel.cpp"].data;
  req.parent.params = {{"THREADS", "1"}, {"VEC", "1"}, {"STORE_EXP", "0"}};
  req.program_id = program_id;
  req.proposal_index = index;
  req.proposer = "external";
  req.seed = 7;
  return req;
}

std::string job_state(messaging::Client& c, const std::string& id) {
  auto body = c.request("broker", "job", proto::encode(proto::JobStatusQuery{id}));
  if (!body.is_ok()) return "error: " + body.status().message();
  auto st = proto::decode<proto::JobStatus>(*body);
  return st.is_ok() ? st->state : "error";
}

}  // namespace

TEST_CASE("the Python bridge serves ProposalRequests only with an allowlisted key", "[integration][bridge]") {
  TempDir dir("kiln-bridge-it");
  const std::string state = dir.path() + "/state", keys = dir.path() + "/keys";
  const int metrics_port = kiln::testing::free_tcp_port();
  const std::string bind = endpoint_at(kiln::testing::free_tcp_port());
  const std::string external = endpoint_at(kiln::testing::free_tcp_port());
  const std::string config = dir.path() + "/kiln.yaml";
  REQUIRE(write_file_atomic(config, "broker:\n  bind: " + bind + "\n  events_bind: \"" +
                                        endpoint_at(kiln::testing::free_tcp_port()) +
                                        "\"\n  external_bind: " + external + "\nup:\n  state_dir: " + state + "\n")
              .is_ok());

  // Key pairs for two bridges; only "agent" goes on the list.
  auto made = run_process({bin_dir() + "/kiln", "--config", config, "--json", "keys", "new", "agent", "--dir", keys});
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  const std::string line = json_string(made.out, "allowlist_line");
  CHECK(line.starts_with("agent "));
  CHECK(json_string(made.out, "allowlist") == state + "/bridges.allow");
  struct stat st {};
  REQUIRE(::stat((keys + "/agent.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto plain = run_process({bin_dir() + "/kiln", "--config", config, "keys", "new", "intruder", "--dir", keys});
  REQUIRE(plain.exit_code == 0);
  CHECK(plain.out.find("intruder ") != std::string::npos);
  auto again = run_process({bin_dir() + "/kiln", "--config", config, "keys", "new", "agent", "--dir", keys});
  CHECK(again.exit_code != 0);  // never overwrites a key pair
  CHECK(again.err.find("already exists") != std::string::npos);
  REQUIRE(make_dirs(state).is_ok());
  append(state + "/bridges.allow", "# bridges admitted to the external endpoint\n" + line + "\n");

  Background broker({bin_dir() + "/kiln-broker", "--config", config, "--state-dir", state, "--metrics-port",
                     std::to_string(metrics_port)},
                    dir.path() + "/broker.log");
  zmq::context_t ctx(1);
  messaging::Client client(ctx, bind);
  REQUIRE(eventually([&] { return client.request("broker", "status", "", 1.0).is_ok(); }, 20, 0.2));
  REQUIRE(::access((state + "/broker.pub").c_str(), R_OK) == 0);  // made on first start

  auto bridge = [&](const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> argv{python(),          source_dir() + "/clients/python/kiln_bridge.py",
                                  "--endpoint",      external,
                                  "--server-key",    state + "/broker.pub",
                                  "--key",           keys + "/" + name + ".key",
                                  "--agent",         source_dir() + "/clients/python/example_agent.py",
                                  "--heartbeat",     "0.2",
                                  "--reconnect-max", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv, 60);
  };
  auto submit = [&](const std::string& program_id, int64_t index) {
    proto::Submit s{"propose.external", program_id + ":propose",
                    proto::Bytes{proto::encode(softmax_request(program_id, index))}, 0};
    auto ack = client.submit(s);
    REQUIRE(ack.is_ok());
    REQUIRE(ack->accepted);
  };

  SECTION("allowlisted: the job is answered with the candidate's compile job") {
    submit("camp/p1", 1);
    auto run = bridge("agent", {"--max-jobs", "1", "--exit-after", "30"});
    INFO(run.err);
    REQUIRE(run.exit_code == 0);
    CHECK(run.out.find("\"jobs\": 1") != std::string::npos);
    CHECK(job_state(client, "camp/p1:propose") == "done");
    CHECK(job_state(client, "camp/p1:compile") == "queued");

    // What a compiler would receive: a CompileRequest built from the request and the task.
    std::mutex mu;
    std::optional<proto::CompileRequest> seen;
    messaging::WorkerOptions o;
    o.endpoint = bind;
    o.service = "compile";
    o.worker_id = "fake-compiler";
    std::atomic<bool> stop{false};
    messaging::Worker compiler(ctx, o, [&](const proto::Job& job) {
      auto req = proto::decode<proto::CompileRequest>(job.payload.data);
      std::lock_guard l(mu);
      if (req.is_ok()) seen = *req;
      return messaging::JobOutcome::ok();
    });
    std::thread t([&] { compiler.run(stop, 1.0); });
    bool got = eventually(
        [&] {
          std::lock_guard l(mu);
          return seen.has_value();
        },
        10);
    stop = true;
    t.join();
    REQUIRE(got);
    CHECK(seen->backend == kiln::proto::Backend::kCpu);
    CHECK(seen->arch == "native");
    CHECK(seen->cand.campaign_id == "camp");
    CHECK(seen->cand.program_id == "camp/p1");
    CHECK(seen->cand.parent_id == "camp/p0");
    CHECK(seen->cand.generation == 1);
    CHECK(seen->cand.proposal_index == 1);
    CHECK(seen->cand.proposer == "external");
    CHECK(seen->cand.code == read_file(source_dir() + "/configs/tasks/softmax/kernel.cpp").value());
    CHECK(seen->cand.params.size() == 3);
    CHECK(seen->cand.params.count("VEC") == 1);
    CHECK(seen->files.count("task.yaml") == 1);

    std::string metrics = kiln::testing::http_get(metrics_port, "/metrics");
    CHECK(metrics.find("kiln_bridge_messages_total{bridge=\"agent\"}") != std::string::npos);
  }

  SECTION("unlisted: refused and given nothing, until a SIGHUP reload admits the key") {
    submit("camp/p2", 2);
    auto refused = bridge("intruder", {"--exit-after", "3"});
    INFO(refused.err);
    REQUIRE(refused.exit_code == 0);
    CHECK(refused.out.find("\"jobs\": 0") != std::string::npos);
    CHECK(job_state(client, "camp/p2:propose") == "queued");
    std::string metrics = kiln::testing::http_get(metrics_port, "/metrics");
    CHECK(metrics.find("kiln_bridge_auth_failures_total 0\n") == std::string::npos);
    CHECK(metrics.find("kiln_bridge_auth_failures_total") != std::string::npos);
    CHECK(metrics.find("bridge=\"intruder\"") == std::string::npos);

    auto pub = read_file(keys + "/intruder.pub");
    REQUIRE(pub.is_ok());
    append(state + "/bridges.allow", "intruder " + pub->substr(0, 40) + "\n");
    REQUIRE(::kill(broker.pid(), SIGHUP) == 0);
    auto admitted = bridge("intruder", {"--max-jobs", "1", "--exit-after", "30"});
    INFO(admitted.err);
    REQUIRE(admitted.exit_code == 0);
    CHECK(admitted.out.find("\"jobs\": 1") != std::string::npos);
    CHECK(job_state(client, "camp/p2:propose") == "done");
    CHECK(job_state(client, "camp/p2:compile") == "queued");
  }
  CHECK(broker.stop() == 0);
}

namespace {

// `kiln up` with the external endpoint open, and the Python bridge admitted and serving `agent`.
struct BridgedKiln {
  TempDir dir{"kiln-bridge-campaign"};
  std::string state = dir.path() + "/state", keys = dir.path() + "/keys";
  std::string bind = endpoint_at(kiln::testing::free_tcp_port());
  std::string external = endpoint_at(kiln::testing::free_tcp_port());
  std::string config = dir.path() + "/kiln.yaml";
  std::unique_ptr<Background> up, bridge;
  zmq::context_t ctx{1};
  std::unique_ptr<messaging::Client> client;

  explicit BridgedKiln(const std::string& agent) {
    std::ofstream(config) << "broker:\n"
                          << "  bind: " << bind << "\n"
                          << "  events_bind: " << endpoint_at(kiln::testing::free_tcp_port()) << "\n"
                          << "  external_bind: " << external << "\n"
                          << "  metrics_port: 0\n"
                          << "  heartbeat_interval_s: 0.25\n"
                          << "ingest: {metrics_port: 0}\n"
                          << "llm_bridge: {metrics_port: 0}\n"
                          << "compiler: {metrics_port: 0}\n"
                          << "tester:\n"
                          << "  metrics_port: 0\n"
                          << "  timing: {min_samples: 10, min_time_s: 0.05, max_time_s: 1.0, warmup_iters: 2}\n"
                          << "scorer: {metrics_port: 0, max_in_flight: 2}\n"
                          << "promoter: {metrics_port: 0, registry_dir: " << dir.path() << "/registry}\n"
                          << "up: {compilers: 1, testers: 1, state_dir: " << state << "}\n";
    up = std::make_unique<Background>(
        std::vector<std::string>{bin_dir() + "/kiln", "--config", config, "up", "--state-dir", state},
        dir.path() + "/up.log");
    client = std::make_unique<messaging::Client>(ctx, bind);
    REQUIRE(eventually([&] { return client->request("broker", "status", "", 0.5).is_ok(); }, 30, 0.2));
    REQUIRE(eventually([&] { return ::access((state + "/broker.pub").c_str(), R_OK) == 0; }, 10));

    auto made = run_process({bin_dir() + "/kiln", "--config", config, "--json", "keys", "new", "agent", "--dir", keys});
    REQUIRE(made.exit_code == 0);
    append(state + "/bridges.allow", json_string(made.out, "allowlist_line") + "\n");  // read within a second
    bridge = std::make_unique<Background>(
        std::vector<std::string>{python(), source_dir() + "/clients/python/kiln_bridge.py", "--endpoint", external,
                                 "--server-key", state + "/broker.pub", "--key", keys + "/agent.key", "--agent", agent,
                                 "--heartbeat", "0.25", "--reconnect-max", "1"},
        dir.path() + "/bridge.log");
  }
  ~BridgedKiln() {
    if (bridge) bridge->stop();
    if (up) up->stop(30);
  }

  // What `kiln submit --proposer external` sends; the campaign once it is done.
  proto::CampaignInfo run_campaign(const std::string& id, const std::string& task_dir, int64_t budget,
                                   int64_t max_in_flight) {
    proto::IngestRequest req;
    req.campaign_id = id;
    req.budget = budget;
    req.proposer = "external";
    req.max_in_flight = max_in_flight;
    for (const char* name : {"task.yaml", "kernel.cpp", "reference.cpp", "instructions.md"})
      if (auto text = read_file(task_dir + "/" + name); text.is_ok()) req.files[name] = proto::Bytes{*text};
    auto ack = client->submit(proto::Submit{"ingest", "ingest:" + id, proto::Bytes{proto::encode(req)}, 0});
    REQUIRE(ack.is_ok());
    REQUIRE(ack->accepted);

    proto::CampaignInfo info;
    bool done = eventually(
        [&] {
          auto body = client->request("score", "campaigns", proto::encode(proto::CampaignQuery{}), 5.0);
          if (!body.is_ok()) return false;
          auto list = proto::decode<proto::CampaignList>(*body);
          if (!list.is_ok()) return false;
          for (const auto& c : list->campaigns)
            if (c.campaign_id == id) info = c;
          return info.state == "done";
        },
        240, 0.5);
    auto log = read_file(dir.path() + "/bridge.log");
    INFO("bridge log:\n" << (log.is_ok() ? *log : std::string()));
    REQUIRE(done);
    return info;
  }

  std::map<std::string, proto::Program> programs(const std::string& id) {
    auto body = client->request("score", "best", proto::encode(proto::CampaignQuery{id, 100}), 5.0);
    REQUIRE(body.is_ok());
    auto best = proto::decode<proto::BestPrograms>(*body);
    REQUIRE(best.is_ok());
    std::map<std::string, proto::Program> out;
    for (auto& p : best->programs) out[p.id] = p;
    return out;
  }
};

}  // namespace

TEST_CASE("a campaign with proposer \"external\" is completed by the Python bridge", "[integration][bridge]") {
  BridgedKiln k(source_dir() + "/clients/python/example_agent.py");
  proto::CampaignInfo info = k.run_campaign("bridged", source_dir() + "/configs/tasks/softmax", 3, 2);
  CHECK(info.proposed == 3);
  CHECK(info.scored == 4);  // program 0 + the bridge's 3 proposals
  CHECK(info.correct >= 1);
  for (int i = 1; i <= 3; ++i) CHECK(job_state(*k.client, "bridged/p" + std::to_string(i) + ":propose") == "done");
  CHECK(k.bridge->stop() == 0);
}

TEST_CASE("a bridge's proposal may change every editable region and nothing else", "[integration][bridge][regions]") {
  const std::string task = source_dir() + "/tests/integration/bridge/two_regions";
  BridgedKiln k(source_dir() + "/tests/integration/bridge/regions_agent.py");
  proto::CampaignInfo info = k.run_campaign("regions", task, 3, 3);
  CHECK(info.scored == 4);
  auto programs = k.programs("regions");
  REQUIRE(programs.size() == 4);
  INFO("p1: " << programs["regions/p1"].eval.eval_log << "\np2: " << programs["regions/p2"].eval.eval_log
              << "\np3: " << programs["regions/p3"].eval.eval_log);
  CHECK(programs["regions/p0"].eval.perf_score == 5);

  // 1. A whole file with a comment added outside the regions: it would build and pass, but scores 0.
  const proto::EvalResult& outside = programs["regions/p1"].eval;
  CHECK(outside.perf_score == 0);
  CHECK(outside.eval_log ==
        "no code extracted: the proposal changed code outside the editable regions (line 14: \"// a harmless "
        "comment, but outside the editable regions\" where the task's kernel has \"extern \"C\" int "
        "kiln_entry(const kiln_args* a) {\")");

  // 2. The bodies of both regions, spliced by Kiln; 3. the whole file with both regions rewritten.
  const std::string kernel = read_file(task + "/kernel.cpp").value();
  for (int i : {2, 3}) {
    const proto::Program& p = programs["regions/p" + std::to_string(i)];
    INFO("p" << i << ":\n" << p.code);
    CHECK(p.eval.perf_score == 5);
    const std::string tag = "// proposal " + std::to_string(i) + "\n";
    CHECK(p.code.find("{ return x * alpha; }  " + tag) != std::string::npos);
    CHECK(p.code.find("for (long i = n - 1; i >= 0; --i) y[i] = scaled(alpha, x[i]);  " + tag) != std::string::npos);
    CHECK(p.code.find("{ return alpha * x; }") == std::string::npos);
    CHECK(p.code.substr(p.code.find("\n}\n")) == kernel.substr(kernel.find("\n}\n")));  // the wrapper is the task's
  }
}
