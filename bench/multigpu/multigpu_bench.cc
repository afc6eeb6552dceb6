// bench/multigpu: one campaign per bundled task of a backend, run through `kiln up` with 1, 2, 4... testers
// (one per GPU on the cuda backend) and a fixed number of compiler replicas. For each tester count it reports
// candidates per hour, each GPU's kiln_gpu_utilization_ratio as scraped from the testers' /metrics during
// the run, and whether every candidate was scored exactly once. With --kill-one, a tester holding a test
// job is SIGKILLed mid-run (its supervisor restarts it); the broker's requeue counter and the archive then
// show the recovery. JSON on stdout, and to --out FILE when given.
//
//   kiln-bench-multigpu --backend cuda --testers 1,2 --budget 6 --out multigpu.json
//   kiln-bench-multigpu --backend cuda --testers 2 --kill-one --budget 6
//   kiln-bench-multigpu --backend cpu --tasks tests/data/tasks --testers 2 --kill-one   (no GPU needed)
#include <signal.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/files.h"
#include "kiln/core/time.h"
#include "kiln/messaging/client.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "kiln/store/sqlite.h"
#include "kiln/task/task.h"
#include "process.h"

using nlohmann::json;
using namespace kiln;
using namespace kiln::testing;

namespace {

struct Options {
  std::string backend = "cuda";
  std::string tasks_dir;
  std::vector<int> testers = {1, 2};
  int compilers = 8;
  int compiler_slots = 1;  // compiler.slots: above 1, a compiler batches the tuner's builds (compiler.batch_max)
  int budget = 6;
  bool kill_one = false;
  double kill_at = 0.3;  // fraction of the candidates scored when the tester is killed
  double timeout_s = 540;
  double timing_min_time_s = 0.3;
  double timing_max_time_s = 2.0;
  std::string out;
  std::string keep;  // a folder: each run's logs, registry and config are copied to <keep>/testers-N
  // Campaign ids "<prefix>.<task folder>" instead of fresh ones: the tuner draws its order of parameter
  // sets from the id, so two runs (screened and full timing, say) that finish their budgets try the same.
  std::string campaign_prefix;
};

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

// Ports for one Kiln; the testers' metrics ports are base + 100 * replica, as `kiln up` assigns them.
struct Ports {
  int broker = free_tcp_port();
  int events = free_tcp_port();
  int metrics = free_tcp_port();
  int tester_base = 0;
};

int tester_metrics_base() {
  // A base whose replicas' ports (base + 100 i) are all likely free: take a free port well below 65535 - 800.
  for (int tries = 0; tries < 50; ++tries) {
    int p = free_tcp_port();
    if (p > 1024 && p < 64000) return p;
  }
  return 20473;
}

std::vector<std::string> task_dirs(const Options& o) {
  auto backend = proto::parse_backend(o.backend);
  if (!backend.is_ok()) fail(backend.status().message());
  auto dirs = task::package_dirs(o.tasks_dir, *backend);
  if (dirs.empty()) fail("no " + o.backend + " tasks under " + o.tasks_dir);
  return dirs;
}

// Every sample of `name{...gpu="G"...} value` in a Prometheus text page, by the gpu label.
std::map<std::string, double> gauge_by_gpu(const std::string& page, const std::string& name) {
  std::map<std::string, double> out;
  std::regex line(name + R"re(\{([^}]*)\} ([-0-9.eE+naif]+))re");
  std::regex gpu(R"re(gpu="([^"]*)")re");
  for (std::sregex_iterator it(page.begin(), page.end(), line), end; it != end; ++it) {
    std::string labels = (*it)[1];
    std::smatch g;
    if (!std::regex_search(labels, g, gpu)) continue;
    try {
      out[g[1]] = std::stod((*it)[2]);
    } catch (...) {
    }
  }
  return out;
}

// The sum of the samples of `name` whose labels contain `label_match` (0 when none).
double sum_of_samples(const std::string& page, const std::string& name, const std::string& label_match) {
  double sum = 0;
  std::regex line(name + R"re(\{([^}]*)\} ([0-9.eE+]+))re");
  for (std::sregex_iterator it(page.begin(), page.end(), line), end; it != end; ++it) {
    if (std::string((*it)[1]).find(label_match) == std::string::npos) continue;
    sum += std::stod((*it)[2]);
  }
  return sum;
}

// The value of a series without labels ("name value").
double value_of(const std::string& page, const std::string& name) {
  std::smatch m;
  if (std::regex_search(page, m, std::regex("(^|\n)" + name + R"re( ([0-9.eE+]+))re"))) return std::stod(m[2]);
  return 0;
}

pid_t pid_of_worker(const std::string& worker_id) {
  auto dash = worker_id.rfind('-');
  if (dash == std::string::npos) return -1;
  try {
    return static_cast<pid_t>(std::stol(worker_id.substr(dash + 1)));
  } catch (...) {
    return -1;
  }
}

struct GpuStats {
  std::vector<double> samples;
  json to_json() const {
    if (samples.empty()) return json{{"samples", 0}};
    double sum = 0, busy = 0;
    for (double s : samples) {
      sum += s;
      if (s > 0) busy += 1;
    }
    return json{{"samples", samples.size()},
                {"mean", sum / samples.size()},
                {"max", *std::max_element(samples.begin(), samples.end())},
                {"fraction_of_samples_busy", busy / samples.size()}};
  }
};

json run_once(const Options& o, int testers, const std::vector<std::string>& dirs, bool kill) {
  TempDir dir("kiln-multigpu");
  Ports ports;
  ports.tester_base = tester_metrics_base();
  std::string config = dir.path() + "/kiln.yaml";
  std::ofstream(config) << "broker:\n"
                        << "  bind: tcp://127.0.0.1:" << ports.broker << "\n"
                        << "  events_bind: tcp://127.0.0.1:" << ports.events << "\n"
                        << "  metrics_port: " << ports.metrics << "\n"
                        << "  heartbeat_interval_s: 0.5\n"
                        << "  heartbeat_liveness: 4\n"
                        << "ingest: {metrics_port: 0}\n"
                        << "llm_bridge: {metrics_port: 0}\n"
                        << "compiler: {metrics_port: 0, slots: " << o.compiler_slots << "}\n"
                        << "tester:\n"
                        << "  backend: " << o.backend << "\n"
                        << "  metrics_port: " << ports.tester_base << "\n"
                        << "  timing: {min_time_s: " << o.timing_min_time_s << ", max_time_s: " << o.timing_max_time_s
                        << "}\n"
                        << "scorer: {metrics_port: 0}\n"
                        << "promoter: {metrics_port: 0, registry_dir: " << dir.path() << "/registry}\n"
                        << "up: {compilers: " << o.compilers << ", testers: " << testers << "}\n";
  std::string state = dir.path() + "/state";
  Background up({bin_dir() + "/kiln", "--config", config, "up", "--state-dir", state}, dir.path() + "/up.log");
  zmq::context_t ctx(1);
  messaging::Client client(ctx, "tcp://127.0.0.1:" + std::to_string(ports.broker));
  // `kiln up` that exits (a config it refuses, say) fails the run at once, with what it said; the folder
  // holding its log is removed as the run fails.
  bool exited = false;
  const bool answered = eventually(
      [&] {
        exited = exited || waitpid(up.pid(), nullptr, WNOHANG) == up.pid();
        return exited || client.request("broker", "status", "", 0.5).is_ok();
      },
      60);
  if (exited || !answered) {
    Result<std::string> read = read_file(dir.path() + "/up.log");
    const std::string log = read.is_ok() ? *read : read.status().to_string();
    fail(std::string(exited ? "kiln up exited" : "kiln up did not answer") + "; its log ends:\n" +
         log.substr(log.size() > 2000 ? log.size() - 2000 : 0));
  }

  auto kiln = [&](std::vector<std::string> args) {
    std::vector<std::string> argv{bin_dir() + "/kiln", "--config", config};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, 120);
  };

  double t0 = wall_time_s();
  std::vector<std::string> ids;
  for (const auto& d : dirs) {
    std::vector<std::string> args{"--json", "submit", d, "--budget", std::to_string(o.budget)};
    if (!o.campaign_prefix.empty()) {
      args.insert(args.end(),
                  {"--campaign-id", o.campaign_prefix + "." + std::filesystem::path(d).filename().string()});
    }
    auto r = kiln(args);
    if (r.exit_code != 0) fail("kiln submit " + d + ": " + r.err);
    ids.push_back(json::parse(r.out)["campaign_id"]);
  }
  const int64_t expected = static_cast<int64_t>(dirs.size()) * (o.budget + 1);
  const std::string test_service = "test." + o.backend;

  std::map<std::string, GpuStats> gpus;  // by gpu label
  json killed = nullptr;
  std::vector<proto::CampaignInfo> infos;
  bool done = false;
  while (!done && wall_time_s() - t0 < o.timeout_s) {
    for (int i = 0; i < testers; ++i) {
      auto page = http_get(ports.tester_base + 100 * i, "/metrics");
      for (const auto& [gpu, v] : gauge_by_gpu(page, "kiln_gpu_utilization_ratio")) gpus[gpu].samples.push_back(v);
    }
    auto body = client.request("score", "campaigns", proto::encode(proto::CampaignQuery{}), 5.0);
    if (body.is_ok()) {
      auto list = proto::decode<proto::CampaignList>(*body);
      if (list.is_ok()) {
        infos.clear();
        int64_t scored = 0;
        size_t finished = 0;
        for (auto& c : list->campaigns) {
          if (std::find(ids.begin(), ids.end(), c.campaign_id) == ids.end()) continue;
          scored += c.scored;
          finished += c.state == "done";
          infos.push_back(c);
        }
        done = finished == ids.size();
        if (kill && killed.is_null() && scored >= o.kill_at * expected) {
          auto sb = client.request("broker", "status", "", 2.0);
          auto st = sb.is_ok() ? proto::decode<proto::BrokerStatus>(*sb) : Result<proto::BrokerStatus>(sb.status());
          if (st.is_ok()) {
            for (const auto& w : st->workers) {
              pid_t pid = pid_of_worker(w.worker_id);
              if (w.service == test_service && w.in_flight > 0 && pid > 0 && ::kill(pid, SIGKILL) == 0) {
                killed = json{{"worker_id", w.worker_id},
                              {"pid", pid},
                              {"at_s", wall_time_s() - t0},
                              {"scored_before", scored},
                              {"gpu", w.caps.gpu_uuid}};
                std::fprintf(stderr, "killed tester %s (pid %d) holding a job, %lld of %lld scored\n",
                             w.worker_id.c_str(), pid, static_cast<long long>(scored),
                             static_cast<long long>(expected));
                break;
              }
            }
          }
        }
      }
    }
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  double wall = wall_time_s() - t0;
  std::string broker_metrics = http_get(ports.metrics, "/metrics");
  up.stop(60);

  // Exactly once, from the archive itself: one program row per candidate, one eval result per program.
  json campaigns = json::array();
  int64_t scored_total = 0, programs_total = 0, eval_results_total = 0, duplicates_total = 0;
  auto db = store::Database::open(state + "/archive.db");
  if (!db.is_ok()) fail("archive: " + db.status().message());
  for (const auto& c : infos) {
    auto count = [&](const char* sql) -> int64_t {
      auto st = db->prepare(sql);
      if (!st.is_ok()) fail(st.status().message());
      st->bind(1, c.campaign_id);
      auto row = st->step();
      return row.is_ok() && *row ? st->column_int(0) : -1;
    };
    int64_t programs = count("SELECT COUNT(*) FROM programs WHERE campaign_id = ?1");
    int64_t scored_programs = count("SELECT COUNT(*) FROM programs WHERE campaign_id = ?1 AND state = 'scored'");
    int64_t eval_results = count("SELECT COUNT(*) FROM results WHERE campaign_id = ?1 AND purpose = 'eval'");
    int64_t duplicates = count("SELECT duplicates FROM campaigns WHERE id = ?1");
    scored_total += c.scored;
    programs_total += programs;
    eval_results_total += eval_results;
    duplicates_total += std::max<int64_t>(0, duplicates);
    campaigns.push_back({{"task", c.task_name},
                         {"state", c.state},
                         {"scored", c.scored},
                         {"programs", programs},
                         {"scored_programs", scored_programs},
                         {"eval_results", eval_results},
                         {"duplicate_results_ignored", duplicates},
                         {"best_speedup", c.best_speedup},
                         {"best_speedup_interval", {c.best_speedup_lo, c.best_speedup_hi}},
                         {"promoted", c.promoted.size()}});
  }
  // Where a test job's time went, from the eval results themselves: the evaluation child's wall time, its
  // correctness and measuring phases, the profile, and how each benchmark case's timing stopped.
  json phases = json::object();
  json evaluations = json::array();
  {
    std::map<std::string, double> sums;
    std::map<std::string, int64_t> counts;
    json stops = json::object();
    int64_t screened_candidates = 0;
    auto st = db->prepare("SELECT payload FROM results");
    if (!st.is_ok()) fail(st.status().message());
    for (auto row = st->step(); row.is_ok() && *row; row = st->step()) {
      auto r = proto::decode<proto::ScoreResult>(st->column_blob(0));
      if (!r.is_ok() || r->stage != proto::Stage::kTest) continue;
      // Every measurement, first or confirming, with its parameters and per-case interval and stop: two runs
      // that tried the same candidates (--campaign-prefix) can be compared candidate by candidate.
      json cases = json::array();
      for (const auto& c : r->test.performance.cases) {
        cases.push_back({{"speedup", c.speedup}, {"interval", {c.speedup_lo, c.speedup_hi}}, {"stop", c.stop_reason}});
      }
      evaluations.push_back({{"program_id", r->cand.program_id},
                             {"purpose", std::string(proto::name(r->purpose))},
                             {"params", r->cand.params},
                             {"status", std::string(proto::word_of(r->test.status))},
                             {"cases", cases}});
      if (r->purpose != proto::Purpose::kEval) continue;
      auto add = [&](const std::string& key, double v) {
        sums[key] += v;
        ++counts[key];
      };
      add("test_s", r->test.duration_s);
      // The evaluator's and the tester's account of where the time went (eval_child_s, eval_correctness_s,
      // eval_exclusive_s, ...).
      for (const auto& [key, value] : r->test.metadata) {
        if (key.rfind("eval_", 0) == 0 && key.size() > 2 && key.compare(key.size() - 2, 2, "_s") == 0)
          add(key, std::atof(value.c_str()));
      }
      if (auto it = r->test.profile.find("profile_s"); it != r->test.profile.end()) add("profile_s", it->second);
      bool screened = false;
      for (const auto& c : r->test.performance.cases) {
        stops[c.stop_reason] = stops.value(c.stop_reason, 0) + 1;
        add("case_timing_s", c.timing_s);
        screened = screened || c.stop_reason == proto::stop_reason::kScreened;
      }
      screened_candidates += screened ? 1 : 0;
    }
    for (const auto& [key, sum] : sums) phases["mean_" + key] = sum / static_cast<double>(counts[key]);
    for (const auto& [key, n] : counts) phases["n_" + key] = n;
    phases["case_stops"] = stops;
    phases["screened_candidates"] = screened_candidates;
  }
  bool all_done = done;
  bool exactly_once =
      all_done && scored_total == expected && programs_total == expected && eval_results_total == expected;
  // Where the time went, from the broker's histograms: how busy the testers were, how long jobs waited.
  const std::string svc = "service=\"" + test_service + "\"";
  double test_jobs = sum_of_samples(broker_metrics, "kiln_job_duration_seconds_count", svc);
  double test_busy_s = sum_of_samples(broker_metrics, "kiln_job_duration_seconds_sum", svc);
  double compile_jobs = sum_of_samples(broker_metrics, "kiln_job_duration_seconds_count", "service=\"compile\"");
  double compile_s = sum_of_samples(broker_metrics, "kiln_job_duration_seconds_sum", "service=\"compile\"");
  double test_wait_n = sum_of_samples(broker_metrics, "kiln_job_queue_wait_seconds_count", svc);
  double test_wait_s = sum_of_samples(broker_metrics, "kiln_job_queue_wait_seconds_sum", svc);
  json pipeline = {{"test_jobs", test_jobs},
                   {"test_job_mean_s", test_jobs > 0 ? test_busy_s / test_jobs : 0},
                   {"tester_busy_fraction", wall > 0 ? test_busy_s / (wall * testers) : 0},
                   {"test_queue_wait_mean_s", test_wait_n > 0 ? test_wait_s / test_wait_n : 0},
                   {"compile_jobs", compile_jobs},
                   {"compile_job_mean_s", compile_jobs > 0 ? compile_s / compile_jobs : 0}};
  // Builds the compilers made several at a time (compiler.batch_max, with compiler.slots > 1): each batch
  // is one line of a compiler's log, "compiler: batch of N: M builds of <source> as one unit".
  {
    int batches = 0, batched_builds = 0;
    const std::regex batch_line(R"re(compiler: batch of [0-9]+: ([0-9]+) builds of )re");
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(dir.path() + "/state/logs", ec)) {
      if (f.path().filename().string().rfind("compiler", 0) != 0) continue;
      std::ifstream in(f.path());
      for (std::string text; std::getline(in, text);) {
        std::smatch m;
        if (!std::regex_search(text, m, batch_line)) continue;
        ++batches;
        batched_builds += std::stoi(m[1].str());
      }
    }
    pipeline["compile_batches"] = batches;
    pipeline["compile_batched_builds"] = batched_builds;
  }
  // Bytes on the wire: every message body the broker received and sent (jobs, results, blobs, heartbeats).
  const double bytes_in = sum_of_samples(broker_metrics, "kiln_broker_bytes_total", "direction=\"in\"");
  const double bytes_out = sum_of_samples(broker_metrics, "kiln_broker_bytes_total", "direction=\"out\"");
  json by_command = json::object();
  for (const char* cmd : {"READY", "JOB", "RESULT", "HEARTBEAT", "DISCONNECT", "SUBMIT", "ACK", "REQUEST", "REPLY"}) {
    const std::string label = std::string("command=\"") + cmd + "\"";
    const double in = sum_of_samples(broker_metrics, "kiln_broker_bytes_total", label + ",direction=\"in\"");
    const double out = sum_of_samples(broker_metrics, "kiln_broker_bytes_total", label + ",direction=\"out\"");
    if (in + out > 0) by_command[cmd] = {{"in", in}, {"out", out}};
  }
  // What the pipeline moves: jobs out, results (with the follow-up jobs they carry) in, the campaigns'
  // submits, and the blob store's traffic; not this bench's own status queries, heartbeats or READYs.
  auto command_bytes = [&](const char* cmd, const char* direction) {
    return by_command.contains(cmd) ? by_command[cmd][direction].get<double>() : 0.0;
  };
  const double blob_bytes = value_of(broker_metrics, "kiln_broker_blob_bytes_total");
  const double pipeline_bytes =
      command_bytes("JOB", "out") + command_bytes("RESULT", "in") + command_bytes("SUBMIT", "in") + blob_bytes;
  json wire = {{"by_command", by_command},
               {"broker_bytes_in", bytes_in},
               {"broker_bytes_out", bytes_out},
               {"blob_bytes", blob_bytes},
               {"pipeline_bytes", pipeline_bytes},
               {"pipeline_bytes_per_candidate", scored_total > 0 ? pipeline_bytes / scored_total : 0},
               {"bytes_per_candidate", scored_total > 0 ? (bytes_in + bytes_out) / scored_total : 0}};
  json gpu_json = json::object();
  for (const auto& [g, s] : gpus) gpu_json[g] = s.to_json();
  json r = {
      {"testers", testers},
      {"compilers", o.compilers},
      {"compiler_slots", o.compiler_slots},
      {"backend", o.backend},
      {"tasks", dirs.size()},
      {"budget_per_task", o.budget},
      {"expected_candidates", expected},
      {"all_campaigns_done", all_done},
      {"wall_s", wall},
      {"candidates_scored", scored_total},
      {"candidates_per_hour", wall > 0 ? scored_total * 3600.0 / wall : 0},
      {"exactly_once", exactly_once},
      {"duplicate_results_ignored", duplicates_total},
      {"requeued_test_jobs", sum_of_samples(broker_metrics, "kiln_jobs_requeued_total", "\"" + test_service + "\"")},
      {"late_results_dropped", sum_of_samples(broker_metrics, "kiln_broker_duplicates_total", "")},
      {"gpu_utilization_ratio", gpu_json},
      {"pipeline", pipeline},
      {"test_phases", phases},
      {"wire", wire},
      {"killed", killed},
      {"campaigns", campaigns},
      {"evaluations", evaluations}};
  if (kill) {
    auto log = read_file(dir.path() + "/up.log");
    r["supervisor_restarted_a_tester"] =
        log.is_ok() && log->find("service tester-") != std::string::npos && log->find("restarted") != std::string::npos;
  }
  if (!o.keep.empty()) {
    // What a later look needs (the testers' logs, the promoted kernels for an independent re-measure, the
    // archive with every evaluation's log).
    namespace fs = std::filesystem;
    const fs::path to = fs::path(o.keep) / ("testers-" + std::to_string(testers) + (kill ? "-kill" : ""));
    std::error_code ec;
    fs::create_directories(to, ec);
    for (const char* what : {"state/logs", "state/archive.db", "registry", "up.log", "kiln.yaml"}) {
      const fs::path from = fs::path(dir.path()) / what;
      if (fs::exists(from, ec))
        fs::copy(from, to / fs::path(what).filename(),
                 fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
    }
    r["kept"] = to.string();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.tasks_dir = source_dir() + "/configs/tasks";
  CLI::App app{"Kiln across several testers (one per GPU): candidates per hour, GPU utilization, a tester killed"};
  app.add_option("--backend", o.backend, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--tasks", o.tasks_dir, "folder of task packages; the ones of --backend run");
  app.add_option("--testers", o.testers, "tester counts to run, e.g. 1,2,4")->delimiter(',');
  app.add_option("--compilers", o.compilers, "compiler replicas");
  app.add_option("--compiler-slots", o.compiler_slots,
                 "builds each compiler holds at once (compiler.slots; above 1 the tuner's CUDA builds are batched)")
      ->check(CLI::Range(1, 64));
  app.add_option("--budget", o.budget, "proposals per campaign");
  app.add_flag("--kill-one", o.kill_one, "SIGKILL a tester holding a job mid-run (in runs with 2+ testers)");
  app.add_option("--kill-at", o.kill_at, "fraction of candidates scored before the kill");
  app.add_option("--timeout", o.timeout_s, "seconds per run");
  app.add_option("--timing-min-time", o.timing_min_time_s, "tester.timing.min_time_s");
  app.add_option("--timing-max-time", o.timing_max_time_s, "tester.timing.max_time_s");
  app.add_option("--out", o.out, "also write the JSON here");
  app.add_option("--keep", o.keep, "copy each run's logs, registry and config to this folder");
  app.add_option("--campaign-prefix", o.campaign_prefix,
                 "campaign ids <prefix>.<task> (the tuner's order follows the id: runs under one prefix try the "
                 "same parameter sets); default: fresh ids");
  CLI11_PARSE(app, argc, argv);
  try {
    auto dirs = task_dirs(o);
    json runs = json::array();
    for (int n : o.testers) {
      std::fprintf(stderr, "run: %d tester(s), %d compilers, %zu tasks x budget %d%s\n", n, o.compilers, dirs.size(),
                   o.budget, o.kill_one && n >= 2 ? ", one tester killed mid-run" : "");
      runs.push_back(run_once(o, n, dirs, o.kill_one && n >= 2));
      std::fprintf(stderr, "%s\n", runs.back().dump().c_str());
    }
    json out = {{"bench", "multigpu"}, {"runs", runs}};
    std::printf("%s\n", out.dump(2).c_str());
    if (!o.out.empty()) std::ofstream(o.out) << out.dump(2) << "\n";
    bool ok = true;
    for (const auto& r : runs) ok = ok && r["exactly_once"].get<bool>();
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-bench-multigpu: %s\n", e.what());
    return 1;
  }
}
