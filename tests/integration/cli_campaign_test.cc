// The `kiln` command against a running Kiln, as a newcomer meets it: a second `kiln up` on the same ports,
// campaigns told apart in `kiln status`, campaign ids it does not know, Ctrl-C of `submit --wait` and
// `kiln cancel`.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "kiln/core/files.h"
#include "kiln/messaging/client.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/payloads.h"
#include "local_kiln.h"
#include "process.h"

using namespace kiln;
using namespace kiln::testing;
using nlohmann::json;

namespace {

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

// Worker ids the broker knows, sorted.
std::vector<std::string> workers(messaging::Client& client) {
  std::vector<std::string> ids;
  auto body = client.request("broker", "status", "", 2.0);
  if (!body.is_ok()) return ids;
  auto st = proto::decode<proto::BrokerStatus>(*body);
  if (!st.is_ok()) return ids;
  for (const auto& w : st->workers) ids.push_back(w.worker_id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

TEST_CASE("a second kiln up on the ports of a running Kiln refuses to start and registers nothing",
          "[integration][cli]") {
  LocalKiln k(1, 1);
  zmq::context_t ctx(1);
  messaging::Client client(ctx, k.endpoint());
  // ingest, propose (the llm-bridge), compile, test.cpu, score and promote
  REQUIRE(eventually([&] { return workers(client).size() >= 6; }, 60, 0.2));
  const std::vector<std::string> before = workers(client);

  const std::string second_state = k.dir.path() + "/second";
  auto r = k.kiln({"up", "--state-dir", second_state}, 60);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.exit_code == 1);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("kiln: port " + std::to_string(k.broker_port) + " (broker.bind) is in use by kiln-broker (pid ") ==
        0);
  CHECK(r.err.find("another Kiln") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(second_state));  // not even its state folder
  CHECK(workers(client) == before);
}

TEST_CASE("kiln status shows campaign ids, and a campaign id kiln does not know is said in user words",
          "[integration][cli]") {
  LocalKiln k(1, 1);
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    // --json after the subcommand, one object either way.
    auto r = k.kiln({"submit", fast_task(), "--budget", "0", "--wait", "--timeout", "120", "--json"});
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    const json out = json::parse(r.out);
    REQUIRE(out.is_object());
    CHECK(out["state"] == "done");
    ids.push_back(out["campaign_id"]);
  }
  REQUIRE(ids[0] != ids[1]);
  auto st = k.kiln({"status"});
  INFO("kiln status:\n" << st.out);
  REQUIRE(st.exit_code == 0);
  for (const auto& id : ids) CHECK(std::regex_search(st.out, std::regex("\n" + id + " +scale_fast ")));
  // One shape for `kiln status` and `kiln best`, --json before or after.
  for (auto args : {std::vector<std::string>{"status"}, std::vector<std::string>{"best", ids[0]}}) {
    auto before = args;
    before.insert(before.begin(), "--json");
    auto after = args;
    after.push_back("--json");
    auto a = k.kiln(before), b = k.kiln(after);
    REQUIRE(a.exit_code == 0);
    REQUIRE(b.exit_code == 0);
    CHECK(json::parse(a.out).is_object());
    CHECK(json::parse(a.out).size() == json::parse(b.out).size());
  }
  auto submitted = k.kiln({"submit", fast_task(), "--budget", "0", "--json"});
  REQUIRE(submitted.exit_code == 0);
  CHECK(json::parse(submitted.out)["state"] == "submitted");

  for (auto args : {std::vector<std::string>{"status", "no-such"}, std::vector<std::string>{"best", "no-such"},
                    std::vector<std::string>{"report", "no-such", "-o", k.dir.path() + "/r.html"},
                    std::vector<std::string>{"cancel", "no-such"}}) {
    auto r = k.kiln(args);
    INFO(args[0] << ": " << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err == "kiln: no campaign 'no-such' (kiln status lists the campaigns)\n");
  }
  CHECK_FALSE(std::filesystem::exists(k.dir.path() + "/r.html"));
}

TEST_CASE("Ctrl-C of submit --wait says the campaign goes on, and kiln cancel stops its proposals",
          "[integration][cli]") {
  LocalKiln k(1, 1);
  // An external proposer with no bridge connected: program 0 is evaluated, then the campaign waits for
  // ever for its proposals, so the wait is still on whenever the signal comes.
  const std::string log = k.dir.path() + "/submit.log";
  Background submit({bin_dir() + "/kiln", "--config", k.config, "submit", fast_task(), "--proposer", "external",
                     "--budget", "5", "--max-in-flight", "1", "--wait"},
                    log);
  std::smatch m;
  std::string text;
  REQUIRE(eventually(
      [&] {
        auto t = read_file(log);
        text = t.is_ok() ? *t : "";
        return std::regex_search(text, m, std::regex("submitted campaign (\\S+)\n")) &&
               text.find(" best ", m.position(0)) != std::string::npos;  // a progress line after it
      },
      120, 0.1));
  const std::string cid = m[1].str();
  REQUIRE(::kill(submit.pid(), SIGINT) == 0);
  const int rc = submit.stop(30);
  auto t = read_file(log);
  REQUIRE(t.is_ok());
  INFO("submit --wait:\n" << *t);
  CHECK(rc == 130);
  CHECK(t->find("kiln: stopped waiting; campaign " + cid + " goes on (kiln status " + cid + "; kiln cancel " + cid +
                " stops it)\n") != std::string::npos);

  auto cancelled = k.kiln({"cancel", cid});
  INFO("cancel: " << cancelled.out << cancelled.err);
  REQUIRE(cancelled.exit_code == 0);
  CHECK(cancelled.out.find("campaign " + cid + " cancelled") == 0);
  auto st = k.kiln({"--json", "status", cid});
  REQUIRE(st.exit_code == 0);
  const json info = json::parse(st.out)["campaigns"].at(0);
  CHECK(info["stop_reason"] == "cancelled");
  CHECK(info["proposed"].get<int>() <= 1);  // max-in-flight 1: nothing after the one in flight
  auto text_status = k.kiln({"status"});
  CHECK(text_status.out.find(cid + ": stopped: cancelled") != std::string::npos);
}
