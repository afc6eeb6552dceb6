// Kiln as a user runs it with an LLM: `kiln up` (every service a real process) with its llm section
// pointed at a scripted fake OpenAI-compatible server; `kiln submit --proposer llm` must fill several
// MAP-Elites cells and `kiln best` must show the lineage of programs and prompts; a scorer killed
// mid-campaign must resume it.
#include <catch2/catch.hpp>

#include <signal.h>

#include <fstream>
#include <optional>
#include <regex>
#include <nlohmann/json.hpp>
#include <set>

#include "kiln/testing/fake_openai.h"
#include "kiln/core/files.h"
#include "kiln/messaging/client.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "process.h"

using namespace kiln;
using namespace kiln::testing;
using nlohmann::json;

namespace {

// Regions for tests/data/tasks/fast_cpu, each correct and each in another cell.
const char* const kRegions[] = {
    // memory 0, compute 0, parallelism 0
    "static void scale(const float* x, float* y, long n, float alpha) {\n"
    "  for (long i = 0; i < n; ++i) y[i] = alpha * x[i];\n}\n",
    // memory 1 (restrict), compute 1 (simd)
    "static void scale(const float* __restrict__ x, float* __restrict__ y, long n, float alpha) {\n"
    "#pragma omp simd\n  for (long i = 0; i < n; ++i) y[i] = alpha * x[i];\n}\n",
    // parallelism 1 (OpenMP threads)
    "static void scale(const float* x, float* y, long n, float alpha) {\n"
    "#pragma omp parallel for\n  for (long i = 0; i < n; ++i) y[i] = alpha * x[i];\n}\n",
    // compute 2 (unrolling, intrinsics)
    "static void scale(const float* x, float* y, long n, float alpha) {\n"
    "#pragma GCC unroll 4\n  for (long i = 0; i < n; ++i) y[i] = __builtin_fmaf(alpha, x[i], 0.0f);\n}\n",
};

// `kiln up` on loopback with the llm section pointed at `server`.
struct LlmKiln {
  TempDir dir{"kiln-it-llm"};
  int broker_port = free_tcp_port();
  std::string config = dir.path() + "/kiln.yaml";
  std::unique_ptr<Background> up;

  explicit LlmKiln(const FakeOpenAI& server) {
    std::ofstream(config) << "broker:\n"
                          << "  bind: tcp://127.0.0.1:" << broker_port << "\n"
                          << "  events_bind: tcp://127.0.0.1:" << free_tcp_port() << "\n"
                          << "  metrics_port: 0\n"
                          << "  heartbeat_interval_s: 0.25\n"
                          << "ingest: {metrics_port: 0}\n"
                          << "llm_bridge: {metrics_port: 0}\n"
                          << "compiler: {metrics_port: 0}\n"
                          << "tester:\n"
                          << "  metrics_port: 0\n"
                          << "  timing: {min_samples: 10, min_time_s: 0.05, max_time_s: 1.0, warmup_iters: 2}\n"
                          << "scorer: {metrics_port: 0, max_in_flight: 2, campaign: {prompt_evolution_interval: 2}}\n"
                          << "promoter: {metrics_port: 0, registry_dir: " << dir.path() << "/registry}\n"
                          << "up: {compilers: 2, testers: 1}\n"
                          << "llm:\n"
                          << "  base_url: " << server.base_url() << "\n"
                          << "  model: fake-coder\n"
                          << "  api_key_env: KILN_IT_NO_SUCH_KEY\n"
                          << "  timeout_s: 20\n"
                          << "  backoff_initial_s: 0.1\n";
    up = std::make_unique<Background>(
        std::vector<std::string>{bin_dir() + "/kiln", "--config", config, "up", "--state-dir", dir.path() + "/state"},
        dir.path() + "/up.log");
    REQUIRE(eventually([&] { return kiln({"status"}).exit_code == 0; }, 60, 0.25));
  }
  ~LlmKiln() {
    if (up) up->stop(30);
  }
  ProcessResult kiln(std::vector<std::string> args) {
    std::vector<std::string> argv{bin_dir() + "/kiln", "--config", config};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, 300);
  }
  std::string log(const std::string& name) {
    auto r = read_file(dir.path() + "/state/logs/" + name + ".log");
    return r.is_ok() ? *r : std::string();
  }
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(broker_port); }
};

std::vector<FakeReply> every_region(int rounds, double delay_s = 0) {
  std::vector<FakeReply> replies;
  for (int round = 0; round < rounds; ++round)
    for (const char* region : kRegions) {
      replies.push_back(kernel_reply(region));
      replies.back().delay_s = delay_s;
    }
  return replies;
}

}  // namespace

TEST_CASE("kiln submit --proposer llm fills archive cells and kiln best shows lineage", "[integration][llm]") {
  FakeOpenAI server;
  server.script(every_region(4));
  server.fallback = kernel_reply(kRegions[0]);
  LlmKiln k(server);

  auto r = k.kiln({"--json", "submit", source_dir() + "/tests/data/tasks/fast_cpu", "--proposer", "llm", "--budget",
                   "4", "--wait", "--timeout", "240"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err << "\nllm-bridge log:\n"
                  << k.log("llm-bridge") << "\nscorer log:\n"
                  << k.log("scorer"));
  REQUIRE(r.exit_code == 0);
  auto out = json::parse(r.out);
  CHECK(out["state"] == "done");
  CHECK(out["scored"] == 5);
  CHECK(server.requests().size() >= 4);

  auto best = k.kiln({"--json", "best", out["campaign_id"]});  // the top 5: every program here
  INFO("best: " << best.out << best.err);
  REQUIRE(best.exit_code == 0);
  auto bj = json::parse(best.out);
  std::set<std::string> cells;
  int llm_programs = 0;
  for (const auto& p : bj["programs"]) {
    const auto& md = p["metadata"];
    if (md.contains("cell")) cells.insert(md["cell"].get<std::string>());
    if (md.value("proposer", "") != "llm" || p["perf_score"] != 5) continue;
    ++llm_programs;
    CHECK(md["model"] == "fake-coder");
    CHECK(!md["prompt_id"].get<std::string>().empty());
    CHECK(md["lineage"].get<std::string>().find("/p0") != std::string::npos);  // back to program 0
    CHECK(md.contains("prompt_lineage"));
    CHECK(std::stoll(md["prompt_tokens"].get<std::string>()) > 0);
  }
  CHECK(llm_programs >= 3);
  CHECK(cells.size() >= 3);
}

TEST_CASE("a scorer killed mid LLM campaign is restarted and the campaign resumes", "[integration][llm]") {
  FakeOpenAI server;
  server.script(every_region(3));
  server.fallback = kernel_reply(kRegions[0]);
  // Two proposals answered, the rest held until the scorer is killed: the campaign (6 proposals) cannot
  // end before the kill, whatever the load.
  server.hold_after(2);
  LlmKiln k(server);
  auto sub =
      k.kiln({"--json", "submit", source_dir() + "/tests/data/tasks/fast_cpu", "--proposer", "llm", "--budget", "6"});
  REQUIRE(sub.exit_code == 0);
  const std::string cid = json::parse(sub.out)["campaign_id"];

  zmq::context_t ctx(1);
  messaging::Client client(ctx, k.endpoint());
  auto campaign = [&]() -> std::optional<proto::CampaignInfo> {
    auto body = client.request("score", "campaign", proto::encode(proto::CampaignQuery{cid, 5}), 2.0);
    if (!body.is_ok()) return std::nullopt;
    auto c = proto::decode<proto::CampaignInfo>(*body);
    return c.is_ok() ? std::optional<proto::CampaignInfo>(*c) : std::nullopt;
  };
  REQUIRE(eventually(
      [&] {
        auto c = campaign();
        return c && c->scored >= 2;
      },
      120, 0.05));
  auto before = campaign();
  REQUIRE(before);
  REQUIRE(before->state != "done");
  pid_t scorer = -1;
  auto status_body = client.request("broker", "status", "", 2.0);
  REQUIRE(status_body.is_ok());
  auto st = proto::decode<proto::BrokerStatus>(*status_body);
  REQUIRE(st.is_ok());
  for (const auto& w : st->workers) {
    auto dash = w.worker_id.rfind('-');
    if (w.service == "score" && dash != std::string::npos)
      scorer = static_cast<pid_t>(std::stol(w.worker_id.substr(dash + 1)));
  }
  REQUIRE(scorer > 0);
  REQUIRE(::kill(scorer, SIGKILL) == 0);
  // The killed scorer is gone before the campaign may go on.
  REQUIRE(eventually([&] { return ::kill(scorer, 0) != 0; }, 30, 0.05));
  server.release();

  std::optional<proto::CampaignInfo> info;
  bool finished = eventually(
      [&] {
        info = campaign();
        return info && info->state == "done";
      },
      240, 0.25);
  INFO("scorer log:\n" << k.log("scorer"));
  REQUIRE(finished);
  CHECK(info->proposed == 6);
  CHECK(info->scored == 7);
  CHECK(info->scored >= before->scored);
  auto body = client.request("score", "best", proto::encode(proto::CampaignQuery{cid, 100}), 5.0);
  REQUIRE(body.is_ok());
  auto best = proto::decode<proto::BestPrograms>(*body);
  REQUIRE(best.is_ok());
  std::set<std::string> ids;
  for (const auto& p : best->programs) ids.insert(p.id);
  CHECK(ids.size() == 7);  // no program lost, none duplicated, program 0 not re-seeded
}

TEST_CASE("a campaign whose proposals keep failing says why everywhere and submit --wait exits 3",
          "[integration][llm]") {
  // The LLM endpoint answers every kernel request with a server error: each proposal is given back until
  // it dies, so no proposal is ever evaluated.
  FakeOpenAI server;
  server.fallback.status = 503;
  LlmKiln k(server);
  auto r = k.kiln({"submit", source_dir() + "/tests/data/tasks/fast_cpu", "--proposer", "llm", "--budget", "2",
                   "--wait", "--timeout", "240"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err << "\nllm-bridge log:\n" << k.log("llm-bridge"));
  CHECK(r.exit_code == 3);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex("submitted campaign (\\S+)\n")));
  const std::string cid = m[1].str();
  // The last line says why, in the words the bridge gave.
  const std::string last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
  CHECK(last.rfind("kiln: campaign " + cid + " done: 2 program(s) not evaluated; latest: ", 0) == 0);
  CHECK(last.find("503") != std::string::npos);

  auto st = k.kiln({"status"});
  CHECK(st.out.find(cid + ": 2 program(s) not evaluated; latest: ") != std::string::npos);
  auto best = k.kiln({"best", cid});
  CHECK(best.out.find("2 program(s) not evaluated; latest: ") != std::string::npos);
  auto js = k.kiln({"best", cid, "--json"});
  REQUIRE(js.exit_code == 0);
  CHECK(json::parse(js.out)["campaign"]["last_not_evaluated"].get<std::string>().find("503") != std::string::npos);
  const std::string page = k.dir.path() + "/report.html";
  REQUIRE(k.kiln({"report", cid, "-o", page}).exit_code == 0);
  auto html = read_file(page);
  REQUIRE(html.is_ok());
  CHECK(html->find("<div id=\"not-evaluated\">2 program(s); latest: ") != std::string::npos);
}

TEST_CASE("kiln cancel stops a campaign's proposals and lets those in flight finish", "[integration][llm]") {
  FakeOpenAI server;
  server.fallback = kernel_reply(kRegions[1]);
  server.hold_after(0);  // every proposal waits at the LLM until the cancel has been taken
  LlmKiln k(server);
  auto sub =
      k.kiln({"submit", source_dir() + "/tests/data/tasks/fast_cpu", "--proposer", "llm", "--budget", "10", "--json"});
  REQUIRE(sub.exit_code == 0);
  const std::string cid = json::parse(sub.out)["campaign_id"];
  auto info = [&] {
    auto r = k.kiln({"--json", "status", cid});
    return r.exit_code == 0 ? json::parse(r.out)["campaigns"].at(0) : json();
  };
  // Program 0 scored and the first proposals at the LLM (max_in_flight 2).
  REQUIRE(eventually([&] { return server.requests().size() >= 2; }, 120, 0.1));
  auto cancel = k.kiln({"cancel", cid});
  INFO("cancel: " << cancel.out << cancel.err);
  REQUIRE(cancel.exit_code == 0);
  CHECK(cancel.out ==
        "campaign " + cid + " cancelled: no new proposals; the 2 in flight finish and are scored first\n");
  server.release();
  json done;
  REQUIRE(eventually(
      [&] {
        done = info();
        return done.is_object() && done["state"] == "done";
      },
      240, 0.25));
  CHECK(done["stop_reason"] == "cancelled");
  CHECK(done["proposed"] == 2);
  CHECK(done["scored"] == 3);
  // A done campaign has nothing left to cancel.
  auto again = k.kiln({"cancel", cid});
  CHECK(again.exit_code == 0);
  CHECK(again.out.find("cancelled: done, 3 program(s) scored") != std::string::npos);
}
