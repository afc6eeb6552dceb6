// Workers SIGKILLed while they hold a job: the broker requeues the job, the supervisor restarts the worker,
// and the campaign still scores every candidate exactly once.
#include <catch2/catch.hpp>

#include <signal.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "kiln/core/files.h"
#include "kiln/messaging/client.h"
#include "kiln/proto/payloads.h"
#include "local_kiln.h"
#include "process.h"

using namespace kiln;
using namespace kiln::testing;
using nlohmann::json;

namespace {

// The pid at the end of a default worker id "<name>-<host>-<pid>".
pid_t pid_of_worker(const std::string& worker_id) {
  auto dash = worker_id.rfind('-');
  return dash == std::string::npos ? -1 : static_cast<pid_t>(std::stol(worker_id.substr(dash + 1)));
}

// The broker's kiln_jobs_requeued_total for one service, every reason together.
double requeued(int metrics_port, const std::string& service) {
  std::istringstream lines(http_get(metrics_port, "/metrics"));
  const std::regex sample("kiln_jobs_requeued_total\\{[^}]*service=\"" +
                          std::regex_replace(service, std::regex("\\."), "\\.") + "\"[^}]*\\} ([0-9.e+]+)");
  double total = 0;
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, m, sample)) total += std::stod(m[1]);
  }
  return total;
}

// SIGKILLs the worker of `service` that holds a job, until the broker requeues a job of that service. The
// broker's status is a snapshot, so a kill can land just after the worker sent its result: that kill
// requeues nothing, and the holder of a later job is killed instead. Returns the kills made, 0 when none
// requeued a job (no job was held any more, or the broker never requeued one).
int kill_until_requeued(LocalKiln& k, messaging::Client& client, const std::string& service) {
  const double before = requeued(k.metrics_port, service);
  for (int kills = 1; kills <= 5; ++kills) {
    std::string victim;
    bool hit = eventually(
        [&] {
          for (const auto& w : broker_status(client).workers) {
            pid_t pid = pid_of_worker(w.worker_id);
            if (w.service == service && w.in_flight > 0 && pid > 0 && ::kill(pid, SIGKILL) == 0) {
              victim = w.worker_id;
              return true;
            }
          }
          return false;
        },
        120, 0.02);
    if (!hit) return 0;
    // The broker drops a dead worker (disconnected, or silent past its liveness) and requeues its job then.
    bool requeue_seen = eventually([&] { return requeued(k.metrics_port, service) > before; }, 15, 0.1);
    if (requeue_seen) return kills;
    UNSCOPED_INFO("the kill of " << victim << " landed after its job ended; killing the next holder");
  }
  return 0;
}

}  // namespace

TEST_CASE("killing a compiler and a tester mid-job loses no candidate and scores each once", "[integration]") {
  LocalKiln k(1);
  auto sub = k.kiln({"--json", "submit", fast_task(), "--budget", "6"});
  REQUIRE(sub.exit_code == 0);
  std::string cid = json::parse(sub.out)["campaign_id"];
  zmq::context_t ctx(1);
  messaging::Client client(ctx, k.endpoint());

  // SIGKILL the process holding a job of each service, until the kill lands mid-job.
  for (const char* service : {"compile", "test.cpu"}) {
    INFO("service " << service);
    REQUIRE(kill_until_requeued(k, client, service) > 0);
  }

  // The campaign still completes.
  proto::CampaignInfo info;
  bool finished = eventually(
      [&] {
        auto body = client.request("score", "campaign", proto::encode(proto::CampaignQuery{cid, 5}), 2.0);
        if (!body.is_ok()) return false;
        auto c = proto::decode<proto::CampaignInfo>(*body);
        if (!c.is_ok()) return false;
        info = *c;
        return info.state == "done";
      },
      300, 0.5);
  INFO("scorer log:\n" << k.log("scorer") << "\nbroker log:\n" << k.log("broker"));
  REQUIRE(finished);
  CHECK(info.scored == 7);

  // Every candidate exactly once: 7 distinct programs, none scored twice.
  auto body = client.request("score", "best", proto::encode(proto::CampaignQuery{cid, 100}), 5.0);
  REQUIRE(body.is_ok());
  auto best = proto::decode<proto::BestPrograms>(*body);
  REQUIRE(best.is_ok());
  std::set<std::string> ids;
  for (const auto& p : best->programs) ids.insert(p.id);
  CHECK(ids.size() == 7);
  CHECK(best->programs.size() == 7);

  // The broker requeued the killed workers' jobs (the kills above waited for that), and the supervisor
  // restarted them.
  CHECK(requeued(k.metrics_port, "compile") >= 1);
  CHECK(requeued(k.metrics_port, "test.cpu") >= 1);
  auto up_log = read_file(k.dir.path() + "/up.log");
  REQUIRE(up_log.is_ok());
  CHECK(up_log->find("restarted") != std::string::npos);
}
