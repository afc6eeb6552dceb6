// `kiln status` on a Kiln with a history: the running campaigns and the last ended ones by default, how
// many more there are, every one with --all, one by id, and --json saying the same. The archive is written
// beforehand through the scorer's engine; only the broker and the scorer run.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <string>

#include "kiln/core/files.h"
#include "kiln/messaging/client.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/ids.h"
#include "kiln/scorer/engine.h"
#include "kiln/testing/campaign_fixtures.h"
#include "process.h"

using namespace kiln;
using namespace kiln::testing;
using nlohmann::json;

namespace {

constexpr int kEnded = 14;

std::string padded(int k) { return (k < 10 ? "old0" : "old") + std::to_string(k); }

// kEnded campaigns that ended one after the other (old00 first), and one still running.
void write_history(const std::string& archive_path) {
  auto engine = scorer::CampaignEngine::open(archive_path);
  REQUIRE(engine.is_ok());
  auto handle = [&](const std::string& job, const std::string& payload) {
    auto h = (*engine)->handle_job(job, payload);
    INFO(job << ": " << (h.is_ok() ? h->answer.error : h.status().message()));
    REQUIRE(h.is_ok());
  };
  auto start = [&](const std::string& cid) {
    handle(proto::job_id::campaign_start(cid), proto::encode(campaign_start(cid, 0, 1)));
  };
  for (int k = 0; k < kEnded; ++k) {
    const std::string cid = padded(k);
    start(cid);
    proto::Candidate c;
    c.campaign_id = cid;
    c.program_id = cid + "/p0";
    handle(c.program_id + ":score", proto::encode(correct(c, 1.0, 0.9, 1.1)));  // budget 0: done
  }
  start("live");
}

struct BrokerAndScorer {
  TempDir dir{"kiln-status-it"};
  int port = free_tcp_port();
  std::string config = dir.path() + "/kiln.yaml";
  std::unique_ptr<Background> broker, scorer;

  BrokerAndScorer() {
    REQUIRE(make_dirs(dir.path() + "/state").is_ok());
    write_history(dir.path() + "/state/archive.db");
    std::ofstream(config) << "broker: {bind: tcp://127.0.0.1:" << port << ", metrics_port: 0}\n"
                          << "scorer: {metrics_port: 0}\n";
    broker = std::make_unique<Background>(
        std::vector<std::string>{bin_dir() + "/kiln-broker", "--config", config, "--state-dir", dir.path() + "/state",
                                 "--metrics-port", "0"},
        dir.path() + "/broker.log");
    scorer = std::make_unique<Background>(
        std::vector<std::string>{bin_dir() + "/kiln-scorer", "--config", config, "--state-dir", dir.path() + "/state",
                                 "--metrics-port", "0"},
        dir.path() + "/scorer.log");
    zmq::context_t ctx(1);
    messaging::Client client(ctx, "tcp://127.0.0.1:" + std::to_string(port));
    REQUIRE(eventually(
        [&] { return client.request("score", "campaigns", proto::encode(proto::CampaignQuery{}), 0.5).is_ok(); }, 60));
  }
  ProcessResult kiln(std::vector<std::string> args) {
    std::vector<std::string> argv{bin_dir() + "/kiln", "--config", config};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, 60);
  }
  json kiln_json(std::vector<std::string> args) {
    args.push_back("--json");
    ProcessResult r = kiln(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out);
  }
};

std::vector<std::string> ids_of(const json& status) {
  std::vector<std::string> ids;
  for (const auto& c : status.at("campaigns")) ids.push_back(c.at("campaign_id").get<std::string>());
  return ids;
}

bool has(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

TEST_CASE("kiln status lists the running campaigns and the last ended ones, and --all every one",
          "[integration][cli][status]") {
  BrokerAndScorer k;

  ProcessResult text = k.kiln({"status"});
  INFO(text.err);
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("live") != std::string::npos);
  CHECK(text.out.find(padded(kEnded - 1)) != std::string::npos);  // ended last
  CHECK(text.out.find("old00") == std::string::npos);             // ended first, of 14
  CHECK(text.out.find("4 older campaign(s) not listed: kiln status --all") != std::string::npos);

  json recent = k.kiln_json({"status"});
  auto ids = ids_of(recent);
  CHECK(ids.size() == 11);  // the running one and the 10 ended last
  CHECK(has(ids, "live"));
  CHECK(has(ids, padded(kEnded - 10)));
  CHECK_FALSE(has(ids, padded(kEnded - 11)));
  CHECK(recent.at("campaigns_not_listed") == 4);

  json two = k.kiln_json({"status", "--recent", "2"});
  CHECK(ids_of(two) == std::vector<std::string>{padded(kEnded - 2), padded(kEnded - 1), "live"});  // by start
  CHECK(two.at("campaigns_not_listed") == kEnded - 2);

  json all = k.kiln_json({"status", "--all"});
  CHECK(ids_of(all).size() == kEnded + 1);
  CHECK(all.at("campaigns_not_listed") == 0);
  ProcessResult all_text = k.kiln({"status", "--all"});
  CHECK(all_text.out.find("old00") != std::string::npos);
  CHECK(all_text.out.find("not listed") == std::string::npos);

  // One campaign by id, however old.
  json one = k.kiln_json({"status", "old00"});
  CHECK(ids_of(one) == std::vector<std::string>{"old00"});
  ProcessResult unknown = k.kiln({"status", "nope"});
  CHECK(unknown.exit_code == 1);
  CHECK(unknown.err.find("no campaign 'nope'") != std::string::npos);
  CHECK(k.kiln({"status", "--recent", "-1"}).exit_code == 2);
}
