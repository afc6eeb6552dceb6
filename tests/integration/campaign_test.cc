// Kiln as a user runs it: `kiln up` starts every service as a real process on loopback; campaigns are
// submitted through the CLI and must reach the verified-kernel registry, even when workers are killed.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "kiln/core/files.h"
#include "kiln/messaging/client.h"
#include "kiln/proto/payloads.h"
#include "kiln/registry/registry.h"
#include "kiln/testing/skip.h"
#include "kiln/testing/torch.h"
#include "local_kiln.h"
#include "process.h"

using namespace kiln;
using namespace kiln::testing;
using nlohmann::json;

namespace {}  // namespace

TEST_CASE("a campaign runs through every real process to the verified-kernel registry", "[integration]") {
  // Two testers: the confirmation of a promising kernel runs on the other one, and the registry entry
  // carries both measurements.
  LocalKiln k(2, 2);
  // Watch the broker's /metrics while the campaign runs: queue depth per service must show up.
  std::atomic<bool> done{false};
  std::set<std::string> services_seen;
  std::mutex mu;
  std::thread scraper([&] {
    std::regex line(R"re(kiln_queue_depth_jobs\{service="([a-z.]+)"\} ([0-9.e+]+))re");
    while (!done) {
      std::string body = http_get(k.metrics_port, "/metrics");
      for (std::sregex_iterator it(body.begin(), body.end(), line), end; it != end; ++it) {
        std::lock_guard l(mu);
        services_seen.insert((*it)[1]);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  auto r = k.kiln({"--json", "submit", fast_task(), "--budget", "4", "--wait", "--timeout", "240"});
  done = true;
  scraper.join();
  INFO("stdout: " << r.out << "\nstderr: " << r.err << "\nscorer log:\n" << k.log("scorer"));
  REQUIRE(r.exit_code == 0);
  auto out = json::parse(r.out);
  CHECK(out["state"] == "done");
  CHECK(out["scored"] == 5);  // program 0 + 4 proposals
  CHECK(out["best_speedup"].get<double>() > 2.0);
  REQUIRE(out["promoted"].size() >= 1);

  auto reg = registry::Registry::open(k.registry);
  REQUIRE(reg.is_ok());
  auto entries = reg->list();
  REQUIRE(entries.is_ok());
  REQUIRE(entries->size() >= 1);
  json e = registry::to_json(entries->front());
  CHECK(std::regex_match(e["kernel_id"].get<std::string>(), std::regex("cpp_scale_[a-z0-9]+_fp32_n65536_v[0-9]+")));
  CHECK(e["verification"]["passed"] == true);
  CHECK(e["benchmark"]["speedup"].get<double>() >= 1.10);
  CHECK(e["evidence_level"] == "op_level");
  CHECK(reg->verify().is_ok());
  // Each tester's measurement, then their merge; both testers run on this one CPU, and the entry says so.
  INFO("evidence: " << e["evidence"].dump());
  const json& measured = e["evidence"]["measurements"];
  REQUIRE(measured.size() == 2);
  CHECK(measured[0]["purpose"] == "eval");
  CHECK(measured[1]["purpose"] == "confirm");
  CHECK(measured[0]["worker_id"] != measured[1]["worker_id"]);
  for (const auto& m : measured) {
    CHECK(m["worker_id"].get<std::string>().rfind("tester-", 0) == 0);
    CHECK(m["speedup_interval"][0].get<double>() >= 1.10);
  }
  const json& merged = e["evidence"]["merged"];
  CHECK(merged["testers"] == 2);
  CHECK(merged["devices"] == 1);
  CHECK(merged["note"] == "one device: 2 testers shared one device for all 2 measurements");
  CHECK(merged["speedup"].get<double>() ==
        Approx(std::sqrt(measured[0]["speedup"].get<double>() * measured[1]["speedup"].get<double>())));
  CHECK(merged["speedup_interval"][0].get<double>() >= 1.10);

  // `kiln registry list` and `kiln best` read what the campaign left.
  auto list = k.kiln({"registry", "--dir", k.registry, "list"});
  CHECK(list.exit_code == 0);
  CHECK(list.out.find(e["kernel_id"].get<std::string>()) != std::string::npos);
  auto best = k.kiln({"--json", "best", out["campaign_id"]});
  REQUIRE(best.exit_code == 0);
  auto bj = json::parse(best.out);
  CHECK(bj["programs"].size() >= 1);
  CHECK(bj["programs"][0]["perf_score"] == 5);

  std::lock_guard l(mu);
  for (const char* s : {"ingest", "propose", "compile", "test.cpu", "score", "promote"}) {
    INFO("service " << s);
    CHECK(services_seen.count(s) == 1);
  }
}

TEST_CASE("a kernel that caches its results by input is never promoted", "[integration]") {
  // Program 0 and every tuner proposal serve a remembered result when the input's address and four
  // sampled values match. Correctness cannot tell (the same inputs come twice), and the reference is
  // slow enough that it would be promoted by a wide margin; the inputs that move while timed catch it.
  LocalKiln k;
  auto r = k.kiln({"--json", "submit", source_dir() + "/tests/data/tasks/caching_cpu", "--budget", "2", "--wait",
                   "--timeout", "240"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err << "\nscorer log:\n" << k.log("scorer"));
  REQUIRE(r.exit_code == 0);
  auto out = json::parse(r.out);
  CHECK(out["state"] == "done");
  CHECK(out["scored"] == 3);
  CHECK(out["promoted"].empty());
  auto reg = registry::Registry::open(k.registry);
  REQUIRE(reg.is_ok());
  auto entries = reg->list();
  REQUIRE(entries.is_ok());
  CHECK(entries->empty());
  auto best = k.kiln({"--json", "best", out["campaign_id"]});
  REQUIRE(best.exit_code == 0);
  INFO("kiln best: " << best.out);
  const json listed = json::parse(best.out);  // not a range over a temporary's member (it would dangle)
  REQUIRE_FALSE(listed["programs"].empty());
  for (const auto& p : listed["programs"]) CHECK(p["perf_score"].get<int>() < 5);
  CHECK(best.out.find("timed round") != std::string::npos);
}

TEST_CASE("a campaign submitted under an id of its own keeps it, and submitting it again changes nothing",
          "[integration]") {
  LocalKiln k;
  // Submits fast_task under the id with `budget` and waits: the campaign's line of `kiln --json submit`.
  auto submit = [&](const std::string& budget) {
    auto r = k.kiln({"--json", "submit", fast_task(), "--budget", budget, "--campaign-id", "bench.fast-1", "--wait",
                     "--timeout", "120"});
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    auto out = json::parse(r.out);
    return out;
  };
  const json first = submit("0");
  CHECK(first["campaign_id"] == "bench.fast-1");
  CHECK(first["state"] == "done");
  CHECK(first["scored"] == 1);
  // The same id again, with another budget: that campaign, done, not a second one.
  const json again = submit("3");
  CHECK(again["campaign_id"] == "bench.fast-1");
  CHECK(again["scored"] == 1);
  auto best = k.kiln({"--json", "best", "bench.fast-1"});
  CHECK(best.exit_code == 0);
  CHECK(best.out.find("bench.fast-1/p0") != std::string::npos);
  // Another task under that id is refused, and nothing is submitted: the id would show another task's campaign.
  auto other = k.kiln({"submit", source_dir() + "/tests/data/tasks/slow_cpu", "--campaign-id", "bench.fast-1"});
  INFO("another task: " << other.err);
  CHECK(other.exit_code == 1);
  CHECK(other.err.rfind("kiln: --campaign-id bench.fast-1: that campaign runs another task ('", 0) == 0);
  CHECK(other.err.find("choose another id") != std::string::npos);
  CHECK(k.kiln({"--json", "best", "bench.fast-1"}).out.find("bench.fast-1/p1") == std::string::npos);
  // An id with a job id's separator is refused before anything is sent.
  auto bad = k.kiln({"submit", fast_task(), "--campaign-id", "bench:1"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("--campaign-id: expected 1-128 characters of [A-Za-z0-9_.-], got \"bench:1\"") !=
        std::string::npos);
}

TEST_CASE("a candidate that cannot reach the bar is screened out, recorded with its partial interval and why",
          "[integration]") {
  // Program 0 is forty times slower than the reference: with screening at the promotion bar its timing
  // stops once its interval says it cannot reach 1.10x, and the archive keeps that interval and the reason.
  LocalKiln k(2, 1, 1.10);
  auto r = k.kiln(
      {"--json", "submit", source_dir() + "/tests/data/tasks/slow_cpu", "--budget", "0", "--wait", "--timeout", "120"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err << "\ntester log:\n" << k.log("tester-1"));
  REQUIRE(r.exit_code == 0);
  auto out = json::parse(r.out);
  CHECK(out["state"] == "done");
  CHECK(out["scored"] == 1);
  CHECK(out["promoted"].empty());
  auto best = k.kiln({"--json", "best", out["campaign_id"]});
  REQUIRE(best.exit_code == 0);
  INFO("kiln best: " << best.out);
  CHECK(best.out.find("screened out on N=65536: speedup 0.") != std::string::npos);
  CHECK(best.out.find("cannot reach 1.1x") != std::string::npos);
}

TEST_CASE("a candidate that cannot overtake the campaign's best is screened out against it", "[integration]") {
  // No bar of the tester's own: the bar comes from the campaign. One proposal at a time, so the later ones
  // are issued once program 0 (one pass) is scored; every other point of the space (forty passes or more)
  // then meets its lower bound as the bar, and its timing stops there. The first proposal, issued beside
  // program 0, meets it too when the tester measured program 0 first (tester.screen_by_best).
  LocalKiln k(2, 1, 0);
  auto r = k.kiln({"--json", "submit", source_dir() + "/tests/data/tasks/twospeed_cpu", "--budget", "3",
                   "--max-in-flight", "1", "--wait", "--timeout", "120"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err << "\ntester log:\n"
                  << k.log("tester-1") << "\nscorer log:\n"
                  << k.log("scorer") << "\nbroker log:\n"
                  << k.log("broker"));
  REQUIRE(r.exit_code == 0);
  auto out = json::parse(r.out);
  CHECK(out["state"] == "done");
  CHECK(out["scored"] == 4);
  auto best = k.kiln({"--json", "best", out["campaign_id"], "--top", "10"});
  REQUIRE(best.exit_code == 0);
  INFO("kiln best: " << best.out);
  int screened = 0;
  const json listed = json::parse(best.out);  // the loop below must not range over a temporary's member
  for (const auto& p : listed["programs"]) {
    const std::string log = p["eval_log"];
    if (log.find("screened out on N=65536") == std::string::npos) continue;
    ++screened;
    CHECK(p["params"].value("REPS", "1") != "1");  // never program 0's own point
    // The proposal's bar, or (the first proposal, issued beside program 0 with none) the bar the tester
    // learned from program 0's own measurement.
    const std::string by = p["eval_metadata"]["timing_screen_by"];
    CHECK((by == "campaign best" || by == "campaign best measured here"));
    CHECK(p["speedup"].get<double>() > 0);  // recorded with the interval as it stood
  }
  CHECK(screened >= 1);
}

TEST_CASE("a CUDA job with no GPU tester waits visibly in the queue", "[integration]") {
  if (::access("/usr/local/cuda/bin/nvcc", X_OK) != 0) {
    KILN_SKIP("nvcc not installed: the CUDA compile path cannot run here");
  }
  LocalKiln k(1);  // CPU tester only
  auto sub = k.kiln({"--json", "submit", source_dir() + "/configs/tasks/cuda_transpose", "--budget", "0"});
  REQUIRE(sub.exit_code == 0);
  zmq::context_t ctx(1);
  messaging::Client client(ctx, k.endpoint());
  bool queued = eventually(
      [&] {
        for (const auto& q : broker_status(client).queues)
          if (q.service == "test.cuda" && q.queued >= 1 && q.workers == 0) return true;
        return false;
      },
      180, 0.2);
  INFO("compiler log:\n" << k.log("compiler-1"));
  REQUIRE(queued);
  // Still there a moment later: it waits, it does not fail.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  auto st = k.kiln({"status"});
  REQUIRE(st.exit_code == 0);
  CHECK(st.out.find("test.cuda") != std::string::npos);
  CHECK(st.out.find("waiting: no worker for this service") != std::string::npos);
  auto js = k.kiln({"--json", "status"});
  auto j = json::parse(js.out);
  bool found = false;
  for (const auto& q : j["queues"])
    if (q["service"] == "test.cuda") found = q["queued"].get<int>() >= 1 && q["failed"].get<int>() == 0;
  CHECK(found);
  // The CPU tester says how it runs candidates: confined, here as on any host where it evaluates at all.
  int testers = 0;
  for (const auto& w : j["workers"])
    if (w["service"] == "test.cpu") {
      ++testers;
      CHECK(w["confinement"] == "confined");
    }
  CHECK(testers == 1);
  CHECK(st.out.find("UNCONFINED") == std::string::npos);
}

TEST_CASE("a campaign submitted with a target speedup stops early", "[integration]") {
  LocalKiln k(1);
  // Program 0 of this task is already far faster than its reference, so the target is met at once.
  auto r = k.kiln(
      {"--json", "submit", fast_task(), "--budget", "12", "--target-speedup", "1.5", "--wait", "--timeout", "240"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  auto out = json::parse(r.out);
  CHECK(out["state"] == "done");
  CHECK(out["stop_reason"].get<std::string>().find("target speedup") != std::string::npos);
  CHECK(out["scored"].get<int>() < 13);
  CHECK(out["proposed"].get<int>() < 12);
}

TEST_CASE("a task with two benchmark cases is scored and promoted on both", "[integration]") {
  // Program 0 is far faster than the reference on the first case and twice as slow on the second; the
  // tuner's one proposal is fast on both (tests/integration/two_cases/task.yaml).
  LocalKiln k(1);
  auto r = k.kiln({"--json", "submit", source_dir() + "/tests/integration/two_cases", "--budget", "1", "--wait",
                   "--timeout", "240"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err << "\nscorer log:\n" << k.log("scorer"));
  REQUIRE(r.exit_code == 0);
  auto out = json::parse(r.out);
  CHECK(out["state"] == "done");
  CHECK(out["scored"] == 2);
  const std::string cid = out["campaign_id"];

  auto best = k.kiln({"--json", "best", cid});
  REQUIRE(best.exit_code == 0);
  INFO("kiln best: " << best.out);
  const json listed = json::parse(best.out);
  std::map<std::string, json> programs;
  for (const auto& p : listed["programs"]) programs[p["id"].get<std::string>()] = p;
  REQUIRE(programs.size() == 2);
  const json& p0 = programs.at(cid + "/p0");
  const json& p1 = programs.at(cid + "/p1");
  CHECK(p0["params"]["SLOW_LARGE"] == "1");
  CHECK(p1["params"]["SLOW_LARGE"] == "0");
  for (const json* p : {&p0, &p1}) {
    CHECK((*p)["perf_score"] == 5);
    REQUIRE((*p)["cases"].size() == 2);
    CHECK((*p)["cases"][0]["dims"]["N"] == 16384);
    CHECK((*p)["cases"][1]["dims"]["N"] == 65536);
    // The program's speedup is the geometric mean of its cases'.
    const double mean =
        std::sqrt((*p)["cases"][0]["speedup"].get<double>() * (*p)["cases"][1]["speedup"].get<double>());
    CHECK((*p)["speedup"].get<double>() == Approx(mean).epsilon(1e-9));
  }
  CHECK(p0["cases"][0]["speedup"].get<double>() > 2.0);
  CHECK(p0["cases"][1]["speedup"].get<double>() < 1.0);
  CHECK(p1["cases"][1]["speedup"].get<double>() > 2.0);
  CHECK(p1["combined_score"].get<double>() > p0["combined_score"].get<double>());

  // Only the kernel fast on both cases reaches the registry, with both cases' numbers.
  auto reg = registry::Registry::open(k.registry);
  REQUIRE(reg.is_ok());
  auto entries = reg->list();
  REQUIRE(entries.is_ok());
  REQUIRE(entries->size() == 1);
  json e = registry::to_json(entries->front());
  CHECK(e["program_id"] == cid + "/p1");
  CHECK(std::regex_match(e["kernel_id"].get<std::string>(), std::regex("cpp_scale_[a-z0-9]+_fp32_n16384_v1")));
  REQUIRE(e["cases"].size() == 2);
  CHECK(e["cases"][1]["dims"]["N"] == 65536);
  for (const auto& c : e["cases"]) CHECK(c["speedup_interval"][0].get<double>() >= 1.10);
  CHECK(out["promoted"].size() == 1);
  for (const auto& note : out["promotion_notes"]) CHECK(note.get<std::string>().find("/p0:") == std::string::npos);

  // The text view lists each case under its program.
  auto text = k.kiln({"best", cid});
  REQUIRE(text.exit_code == 0);
  INFO("kiln best (text): " << text.out);
  CHECK(text.out.find("N=16384: ") != std::string::npos);
  CHECK(text.out.find("N=65536: ") != std::string::npos);
  CHECK(text.out.find("geometric means over the benchmark cases") != std::string::npos);
}

TEST_CASE("a campaign on a task with a PyTorch reference states its speedup against PyTorch eager",
          "[integration][torch]") {
  if (!kiln::testing::have_torch()) KILN_SKIP(kiln::testing::kSystemPython << " has no torch");
  // The tester finds /usr/bin/python3 itself (tester.python unset); the reference is reference.py, whose
  // `scale` parameter the candidate gets as an input.
  LocalKiln k(1);
  auto r = k.kiln({"--json", "submit", source_dir() + "/tests/data/tasks/torch_cpu", "--budget", "2", "--wait",
                   "--timeout", "240"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err << "\ntester log:\n" << k.log("tester"));
  REQUIRE(r.exit_code == 0);
  const json out = json::parse(r.out);
  CHECK(out["state"] == "done");
  CHECK(out["scored"] == 3);  // program 0 + 2 proposals
  CHECK(out["best_speedup"].get<double>() > 0);

  auto best = k.kiln({"--json", "best", out["campaign_id"]});
  REQUIRE(best.exit_code == 0);
  INFO("kiln best: " << best.out);
  const json listed = json::parse(best.out);
  REQUIRE(listed["programs"].size() >= 1);
  for (const auto& p : listed["programs"]) {
    // Correct against the module, timed against it, and the measurement says what the reference was.
    CHECK(p["perf_score"] == 5);
    CHECK(p["eval_metadata"]["reference"] == "torch_eager");
    CHECK_FALSE(p["eval_metadata"]["torch"].get<std::string>().empty());
    REQUIRE(p["cases"].size() == 1);
    CHECK(p["cases"][0]["speedup"].get<double>() > 0);
  }
}

TEST_CASE("kiln report renders a real campaign that a headless browser shows without script errors",
          "[integration][report]") {
  const std::string chromium = "/usr/bin/chromium";
  if (!std::filesystem::exists(chromium)) FAIL("chromium is missing: `make deps` installs it");
  LocalKiln k(1);
  auto r = k.kiln({"--json", "submit", fast_task(), "--budget", "4", "--wait", "--timeout", "240"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  const json campaign = json::parse(r.out);
  const std::string cid = campaign["campaign_id"];
  auto best = k.kiln({"--json", "best", cid});
  REQUIRE(best.exit_code == 0);
  const json listed = json::parse(best.out);

  // The page is written where asked, kept under build/ for a person to look at.
  const std::string out_dir = bin_dir() + "/../report";
  const std::string page = out_dir + "/campaign-report.html";
  std::filesystem::create_directories(out_dir);  // kiln writes the page, it creates no folder for it
  auto written = k.kiln({"report", cid, "-o", page});
  INFO("kiln report: " << written.out << written.err);
  REQUIRE(written.exit_code == 0);
  REQUIRE(std::filesystem::exists(page));
  auto html = read_file(page);
  REQUIRE(html.is_ok());
  CHECK(html->find("http://") == std::string::npos);  // self-contained: nothing fetched from anywhere
  CHECK(html->find("https://") == std::string::npos);

  // A real browser: the DOM after the page's script ran, and a screenshot.
  const std::string profile = k.dir.path() + "/chromium";
  const std::vector<std::string> browser = {chromium,
                                            "--headless",
                                            "--no-sandbox",
                                            "--disable-gpu",
                                            "--disable-dev-shm-usage",
                                            "--no-first-run",
                                            "--user-data-dir=" + profile};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = browser;
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("file://" + std::filesystem::absolute(page).string());
    return argv;
  };
  auto dom = run_process(with({"--dump-dom"}), 120);
  INFO("chromium stderr: " << dom.err.substr(0, 2000));
  REQUIRE(dom.exit_code == 0);
  const std::string& d = dom.out;
  CHECK(d.find("data-ready=\"1\"") != std::string::npos);  // the script ran to its end
  CHECK(d.find("data-errors") == std::string::npos);       // and window.onerror never fired
  for (const char* id : {"campaign", "progress", "map", "lineage", "candidates", "registry"})
    CHECK(d.find(std::string("<section id=\"") + id + "\"") != std::string::npos);
  // The campaign's real numbers, as `kiln best` reports them.
  char speedup[32];
  std::snprintf(speedup, sizeof speedup, "%.2fx", listed["campaign"]["best_speedup"].get<double>());
  std::smatch m;
  REQUIRE(std::regex_search(d, m, std::regex(R"re(<div id="best-speedup">([^<]*)</div>)re")));
  CHECK(m[1].str().find(speedup) != std::string::npos);
  CHECK(m[1].str().find(listed["campaign"]["best_program_id"].get<std::string>()) != std::string::npos);
  REQUIRE(std::regex_search(d, m, std::regex(R"re(<div id="scored">([0-9]+) \(([0-9]+) correct\)</div>)re")));
  CHECK(std::stoll(m[1].str()) == campaign["scored"].get<int64_t>());
  const std::regex row(R"re(<tr id="p-[^"]+" data-status="([a-z_]+)")re");
  size_t rows = 0;
  for (std::sregex_iterator it(d.begin(), d.end(), row), end; it != end; ++it) ++rows;
  CHECK(rows == campaign["scored"].get<size_t>());
  CHECK(d.find("class=\"cell\"") != std::string::npos);  // the map has at least one filled cell
  CHECK(d.find("id=\"best-line\"") != std::string::npos);
  for (const auto& id : campaign["promoted"]) CHECK(d.find(id.get<std::string>()) != std::string::npos);

  const std::string shot = out_dir + "/campaign-report.png";
  std::filesystem::remove(shot);
  auto png = run_process(with({"--screenshot=" + shot, "--window-size=1280,2400", "--hide-scrollbars"}), 120);
  CHECK(png.exit_code == 0);
  CHECK(std::filesystem::exists(shot));
  CHECK(std::filesystem::file_size(shot) > 10000);

  // The scorer serves the same page; an unknown campaign is not a page.
  const std::string served = http_get(k.scorer_port, "/campaigns/" + cid + "/report");
  CHECK(served.find("<section id=\"candidates\"") != std::string::npos);
  CHECK(served.find(cid) != std::string::npos);
  CHECK(http_get(k.scorer_port, "/campaigns/no-such-campaign/report").empty());
  // `kiln best` points at it.
  auto text = k.kiln({"best", cid});
  CHECK(text.out.find("report: kiln report " + cid) != std::string::npos);
}

TEST_CASE("kiln up --demo writes a report per campaign next to its results table", "[integration][report]") {
  TempDir dir{"kiln-demo"};
  const std::string tasks = dir.path() + "/tasks";
  std::filesystem::create_directories(tasks);
  std::filesystem::copy(fast_task(), tasks + "/fast_cpu", std::filesystem::copy_options::recursive);
  const std::string config = dir.path() + "/kiln.yaml";
  std::ofstream(config)
      << "broker:\n"
      << "  bind: tcp://127.0.0.1:" << free_tcp_port() << "\n"
      << "  events_bind: tcp://127.0.0.1:" << free_tcp_port() << "\n"
      << "  metrics_port: 0\n"
      << "ingest: {metrics_port: 0}\nllm_bridge: {metrics_port: 0}\ncompiler: {metrics_port: 0}\n"
      << "tester:\n  metrics_port: 0\n"
      << "  timing: {mode: warm, min_samples: 10, min_time_s: 0.2, max_time_s: 2.0, warmup_iters: 2}\n"
      << "scorer: {metrics_port: 0}\n"
      << "promoter: {metrics_port: 0, registry_dir: " << dir.path() << "/registry}\n"
      << "up: {compilers: 1, testers: 1}\n";
  auto r = run_process({bin_dir() + "/kiln", "--config", config, "up", "--demo", "--tasks", tasks, "--budget", "2",
                        "--state-dir", dir.path() + "/state", "--timeout", "240"},
                       300);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  // Every service stopped when asked to, none had to be killed (a worker that had fetched a task package
  // once waited for ever in its ZeroMQ context's destructor).
  CHECK(r.out.find("did not stop") == std::string::npos);
  CHECK(r.err.find("did not stop") == std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex("report: (/[^\\n]+\\.html)")));
  const std::string page = m[1].str();
  CHECK(page.rfind(dir.path() + "/state/reports/", 0) == 0);
  auto html = read_file(page);
  REQUIRE(html.is_ok());
  CHECK(html->find("<section id=\"candidates\"") != std::string::npos);
  CHECK(html->find("fast") != std::string::npos);
}
