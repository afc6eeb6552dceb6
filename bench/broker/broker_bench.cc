// bench/broker: jobs per second through submit -> lease -> result, with 1 and 4 workers, and the raw
// ZeroMQ PUSH/PULL message rate for the same payload size on the same machine, in the same run.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <thread>

#include "kiln/broker/broker.h"
#include "kiln/core/files.h"
#include "kiln/core/time.h"
#include "kiln/messaging/frames.h"
#include "kiln/messaging/worker.h"
#include "kiln/proto/wire.h"

using namespace kiln;
using nlohmann::json;

namespace {

json run_broker(int workers_n, int jobs, size_t payload_bytes) {
  TempDir dir("kiln-bench-broker");
  zmq::context_t ctx(2);
  broker::BrokerOptions opt;
  opt.bind = "tcp://127.0.0.1:*";
  opt.db_path = dir.path() + "/broker.db";
  auto b = broker::Broker::create(ctx, opt, std::make_shared<prometheus::Registry>());
  if (!b.is_ok()) throw std::runtime_error(b.status().message());
  std::atomic<bool> stop{false}, wstop{false};
  std::thread bt([&] { (*b)->run(stop); });
  std::atomic<int> done{0};
  std::vector<std::unique_ptr<messaging::Worker>> ws;
  std::vector<std::thread> wt;
  for (int i = 0; i < workers_n; ++i) {
    messaging::WorkerOptions wo;
    wo.endpoint = (*b)->endpoint();
    wo.service = "bench";
    wo.worker_id = "w" + std::to_string(i);
    wo.slots = 1;
    ws.push_back(std::make_unique<messaging::Worker>(ctx, wo, [&](const proto::Job&) {
      ++done;
      return messaging::JobOutcome::ok();
    }));
  }
  for (auto& w : ws) wt.emplace_back([&, p = w.get()] { p->run(wstop, 1.0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  zmq::socket_t client(ctx, zmq::socket_type::dealer);
  client.set(zmq::sockopt::linger, 0);
  client.connect((*b)->endpoint());
  std::string payload(payload_bytes, 'p');
  double t0 = monotonic_s();
  int acks = 0;
  for (int i = 0; i < jobs; ++i) {
    proto::Submit s{"bench", "job-" + std::to_string(i), proto::Bytes{payload}, 0};
    std::string body = proto::encode(s);
    // Past the high-water mark a send would block: drain ACKs and try again.
    while (!messaging::send_envelope(client, "", proto::cmd::kSubmit, body).is_ok()) {
      while (auto env = messaging::recv_envelope(client, false)) ++acks;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    while (auto env = messaging::recv_envelope(client, false)) ++acks;
  }
  while (done < jobs && monotonic_s() - t0 < 20) {
    while (auto env = messaging::recv_envelope(client, false)) ++acks;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  double elapsed = monotonic_s() - t0;
  const auto& bc = (*b)->counters();
  json counters{{"completed", bc.completed.load()},
                {"late_results", bc.late_results.load()},
                {"requeued", bc.requeued.load()},
                {"rejected_frames", bc.rejected_frames.load()},
                {"duplicate_submits", bc.duplicate_submits.load()},
                {"acks", acks}};
  wstop = true;
  for (auto& t : wt) t.join();
  stop = true;
  bt.join();
  double rate = done / elapsed;
  return json{{"workers", workers_n},       {"jobs", jobs},
              {"completed", done.load()},   {"seconds", elapsed},
              {"jobs_per_second", rate},    {"ms_per_job", 1000.0 / rate},
              {"broker_counters", counters}};
}

json run_raw(int messages, size_t payload_bytes) {
  zmq::context_t ctx(2);
  zmq::socket_t pull(ctx, zmq::socket_type::pull);
  pull.bind("tcp://127.0.0.1:*");
  std::string ep = pull.get(zmq::sockopt::last_endpoint);
  std::thread pusher([&] {
    zmq::socket_t push(ctx, zmq::socket_type::push);
    push.set(zmq::sockopt::linger, 1000);
    push.connect(ep);
    std::string payload(payload_bytes, 'p');
    for (int i = 0; i < messages; ++i) push.send(zmq::buffer(payload), zmq::send_flags::none);
  });
  zmq::message_t m;
  (void)pull.recv(m);
  double t0 = monotonic_s();
  for (int i = 1; i < messages; ++i) (void)pull.recv(m);
  double elapsed = monotonic_s() - t0;
  pusher.join();
  return json{{"messages", messages}, {"seconds", elapsed}, {"messages_per_second", (messages - 1) / elapsed}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-bench-broker: broker throughput against raw ZeroMQ"};
  int jobs = 5000;
  size_t payload = 1024;
  std::string out;
  app.add_option("--jobs", jobs, "jobs per run");
  app.add_option("--payload-bytes", payload, "payload size");
  app.add_option("--json", out, "also write the JSON here");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  json raw = run_raw(jobs * 20, payload);
  json one = run_broker(1, jobs, payload);
  json four = run_broker(4, jobs, payload);
  double raw_rate = raw["messages_per_second"];
  json result{{"benchmark", "broker"},
              {"payload_bytes", payload},
              {"raw_zmq_push_pull", raw},
              {"broker", json::array({one, four})},
              {"ratio_to_raw", json::array({one["jobs_per_second"].get<double>() / raw_rate,
                                            four["jobs_per_second"].get<double>() / raw_rate})},
              {"target", "broker overhead per job < 1 ms"}};
  std::printf("%s\n", result.dump(2).c_str());
  if (!out.empty()) {
    std::filesystem::create_directories(std::filesystem::path(out).parent_path());
    (void)write_file_atomic(out, result.dump(2) + "\n");
  }
  return 0;
}
