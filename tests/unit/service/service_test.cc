// The common life of a worker service (kiln/service/service.h) without a broker process: the flags, the
// context a handler factory gets, the /metrics port and the worker options it builds from flags, config and
// handlers; then whole runs of run_worker_service in a child process (it installs signal handlers and a
// process-wide logger, so each run gets a process of its own): a factory error or a bad config ends it with
// one line, and a running worker serves its metrics and pages, says READY to a broker socket the test
// holds, and stops on SIGTERM.
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "kiln/core/files.h"
#include "kiln/messaging/frames.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/wire.h"
#include "kiln/service/service.h"

using namespace kiln;
using service::ParsedFlags;
using service::ServiceFlags;
using service::ServiceSpec;

namespace {

// A time bound for waits on a child, far above what any of them takes: reaching it fails the test, it is
// never part of a success.
constexpr int kChildWaitMs = 30'000;

ServiceSpec sample_spec() {
  ServiceSpec spec;
  spec.name = "sample";
  spec.service = "score";
  spec.default_metrics_port = 9999;
  spec.make = [](const service::ServiceContext&) -> Result<service::ServiceHandlers> {
    return service::ServiceHandlers{};
  };
  return spec;
}

// parse_flags over an argument list (the program name first), its output and error text kept.
struct Parse {
  ParsedFlags parsed;
  std::string out, err;
};
Parse parse(std::vector<std::string> args, const ServiceSpec& spec = sample_spec()) {
  args.insert(args.begin(), "kiln-sample");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  Parse p{service::parse_flags(static_cast<int>(argv.size()), argv.data(), spec, out, err), {}, {}};
  p.out = out.str();
  p.err = err.str();
  return p;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A child process running `body` with its stdout and stderr piped back to the test. The child never
// returns into the test framework: it leaves with _exit(body's status).
class Child {
 public:
  explicit Child(const std::function<int()>& body) {
    int out[2], err[2];
    REQUIRE(::pipe(out) == 0);
    REQUIRE(::pipe(err) == 0);
    std::fflush(nullptr);  // what the test framework buffered is its own, not the child's to write again
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
      int status = 99;
      try {
        status = body();
      } catch (...) {
      }
      std::fflush(nullptr);
      ::_exit(status);
    }
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_fd_);
    ::close(err_fd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // Reads stderr until a line containing `needle` has arrived (true), or stderr closes or the time bound
  // passes (false).
  bool wait_for_stderr(const std::string& needle) {
    while (err_.find(needle) == std::string::npos) {
      if (!read_some(err_fd_, err_)) return false;
    }
    return true;
  }

  // Waits for the exit (reading both pipes to their end meanwhile) and returns the exit status, or -1 when
  // it was ended by a signal.
  int wait_exit() {
    while (read_some(out_fd_, out_)) {
    }
    while (read_some(err_fd_, err_)) {
    }
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  static bool read_some(int fd, std::string& into) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kChildWaitMs) <= 0) return false;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    into.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
};

// run_worker_service(spec) with these flags, as a child's main would call it.
int run_service(const ServiceSpec& spec, std::vector<std::string> args) {
  args.insert(args.begin(), "kiln-" + spec.name);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return service::run_worker_service(static_cast<int>(args.size()), argv.data(), spec);
}

// The next message of `command` on a ROUTER socket, skipping heartbeats; nullopt after the time bound.
std::optional<messaging::Envelope> next_message(zmq::socket_t& router, std::string_view command) {
  zmq::pollitem_t item{static_cast<void*>(router), 0, ZMQ_POLLIN, 0};
  while (zmq::poll(&item, 1, std::chrono::milliseconds(kChildWaitMs)) > 0) {
    while (auto env = messaging::recv_envelope(router, true)) {
      if (env->is_ok() && env->value().command == command) return env->value();
    }
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("flags: the defaults, and each flag read into its field", "[service]") {
  Parse none = parse({});
  REQUIRE_FALSE(none.parsed.exit_status);
  const ServiceFlags& d = none.parsed.flags;
  CHECK(d.config_path.empty());
  CHECK(d.state_dir == ".kiln");
  CHECK(d.broker.empty());
  CHECK(d.worker_id.empty());
  CHECK(d.slots == 0);
  CHECK(d.metrics_port == -1);  // not given: the configured port, not "any free port" (0)
  CHECK(d.metrics_host == "0.0.0.0");
  CHECK(d.log_level.empty());

  Parse all =
      parse({"--config", "kiln.yaml", "--state-dir", "/var/kiln", "--broker", "tcp://10.0.0.1:5555", "--worker-id",
             "w7", "--slots", "3", "--metrics-port", "0", "--metrics-host", "127.0.0.1", "--log-level", "debug"});
  REQUIRE_FALSE(all.parsed.exit_status);
  const ServiceFlags& f = all.parsed.flags;
  CHECK(f.config_path == "kiln.yaml");
  CHECK(f.state_dir == "/var/kiln");
  CHECK(f.broker == "tcp://10.0.0.1:5555");
  CHECK(f.worker_id == "w7");
  CHECK(f.slots == 3);
  CHECK(f.metrics_port == 0);
  CHECK(f.metrics_host == "127.0.0.1");
  CHECK(f.log_level == "debug");
  CHECK(all.out.empty());
  CHECK(all.err.empty());
}

TEST_CASE("flags: --help ends the process with 0, a bad flag with an error naming it", "[service]") {
  Parse help = parse({"--help"});
  REQUIRE(help.parsed.exit_status);
  CHECK(*help.parsed.exit_status == 0);
  CHECK(help.out.find("kiln-sample: Kiln 'score' worker") != std::string::npos);
  CHECK(help.out.find("--metrics-port") != std::string::npos);

  Parse unknown = parse({"--no-such-flag"});
  REQUIRE(unknown.parsed.exit_status);
  CHECK(*unknown.parsed.exit_status != 0);
  CHECK(unknown.err.find("--no-such-flag") != std::string::npos);

  Parse not_a_number = parse({"--slots", "many"});
  REQUIRE(not_a_number.parsed.exit_status);
  CHECK(*not_a_number.parsed.exit_status != 0);
  CHECK(not_a_number.err.find("--slots") != std::string::npos);
}

TEST_CASE("the context: an absolute state dir that exists, a worker id, a registry", "[service]") {
  TempDir tmp("kiln-service");
  const config::KilnConfig cfg;
  ServiceFlags flags;
  flags.state_dir = tmp.path() + "/a/b/../state";
  auto ctx = service::make_context(sample_spec(), flags, cfg);
  REQUIRE(ctx.is_ok());
  CHECK(ctx->config == &cfg);
  CHECK(std::filesystem::is_directory(tmp.path() + "/a/state"));
  CHECK(std::filesystem::path(ctx->state_dir).is_absolute());
  CHECK(std::filesystem::equivalent(ctx->state_dir, tmp.path() + "/a/state"));
  REQUIRE(ctx->metrics);
  // Unique per process start: the name, the host and this process.
  CHECK(ctx->worker_id.rfind("sample-", 0) == 0);
  CHECK(ctx->worker_id.size() > std::string("sample-").size() + std::to_string(::getpid()).size());
  CHECK(ctx->worker_id.ends_with("-" + std::to_string(::getpid())));

  SECTION("a relative state dir is made absolute against the working directory") {
    flags.state_dir = "relative-state";
    const auto cwd = std::filesystem::current_path();
    std::filesystem::current_path(tmp.path());
    auto rel = service::make_context(sample_spec(), flags, cfg);
    std::filesystem::current_path(cwd);
    REQUIRE(rel.is_ok());
    CHECK(rel->state_dir == tmp.path() + "/relative-state");
  }
  SECTION("--worker-id is kept as given, and each context gets its own registry") {
    flags.worker_id = "scorer-a";
    auto named = service::make_context(sample_spec(), flags, cfg);
    REQUIRE(named.is_ok());
    CHECK(named->worker_id == "scorer-a");
    CHECK(named->metrics != ctx->metrics);
  }
  SECTION("a state dir that cannot be made is an error naming it") {
    std::ofstream(tmp.path() + "/file") << "x";
    flags.state_dir = tmp.path() + "/file/state";
    auto bad = service::make_context(sample_spec(), flags, cfg);
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.status().message().find(tmp.path() + "/file") != std::string::npos);
  }
}

TEST_CASE("the /metrics port: the flag, else the service's config section, else the spec's default", "[service]") {
  config::KilnConfig cfg;
  cfg.ingest.metrics_port = 9001;
  cfg.llm_bridge.metrics_port = 9002;
  cfg.compiler.metrics_port = 9003;
  cfg.tester.metrics_port = 9004;
  cfg.scorer.metrics_port = 9005;
  cfg.promoter.metrics_port = 9006;
  cfg.broker.metrics_port = 9007;  // not a worker's
  ServiceSpec spec = sample_spec();
  const ServiceFlags flags;
  for (auto [svc, port] : std::vector<std::pair<std::string, int>>{{"ingest", 9001},
                                                                   {"propose", 9002},
                                                                   {"compile", 9003},
                                                                   {"test.cpu", 9004},
                                                                   {"test.cuda", 9004},
                                                                   {"score", 9005},
                                                                   {"promote", 9006},
                                                                   {"other", 9999}}) {
    spec.service = svc;
    INFO(svc);
    CHECK(service::metrics_port(spec, flags, cfg) == port);
  }
  ServiceFlags given;
  given.metrics_port = 0;  // any free port: a choice, not "unset"
  CHECK(service::metrics_port(spec, given, cfg) == 0);
  given.metrics_port = 8123;
  CHECK(service::metrics_port(spec, given, cfg) == 8123);
}

TEST_CASE("the worker options: flags over handlers over config", "[service]") {
  config::KilnConfig cfg;
  cfg.broker.bind = "tcp://*:6000";
  cfg.broker.heartbeat_interval_s = 0.25;
  cfg.broker.heartbeat_liveness = 6;
  cfg.broker.max_message_bytes = 1 << 20;
  const ServiceSpec spec = sample_spec();
  service::ServiceContext ctx;
  ctx.worker_id = "sample-1";
  service::ServiceHandlers handlers;
  handlers.slots = 2;
  handlers.caps.backend = proto::Backend::kCpu;
  ServiceFlags flags;

  messaging::WorkerOptions wo = service::worker_options(spec, flags, cfg, ctx, handlers);
  CHECK(wo.endpoint == "tcp://127.0.0.1:6000");  // a wildcard bind is reached on loopback
  CHECK(wo.service == "score");
  CHECK(wo.worker_id == "sample-1");
  CHECK(wo.slots == 2);
  CHECK(wo.caps.backend == proto::Backend::kCpu);
  CHECK_FALSE(wo.caps.host.empty());  // filled with this host's name
  CHECK(wo.heartbeat_interval_s == 0.25);
  CHECK(wo.heartbeat_liveness == 6);
  CHECK(wo.socket.max_message_bytes == (1 << 20));

  flags.broker = "ipc:///tmp/kiln-broker";
  flags.slots = 5;
  handlers.service = "test.cuda";  // the handlers know their backend better than the spec
  handlers.caps.host = "gpu-box";
  wo = service::worker_options(spec, flags, cfg, ctx, handlers);
  CHECK(wo.endpoint == "ipc:///tmp/kiln-broker");
  CHECK(wo.slots == 5);
  CHECK(wo.service == "test.cuda");
  CHECK(wo.caps.host == "gpu-box");
}

TEST_CASE("a handler factory that fails ends the service with status 1 and one line", "[service]") {
  TempDir tmp("kiln-service");
  ServiceSpec spec = sample_spec();
  spec.make = [](const service::ServiceContext& ctx) -> Result<service::ServiceHandlers> {
    return failed_precondition("no archive in " + ctx.state_dir);
  };
  Child child([&] { return run_service(spec, {"--state-dir", tmp.path(), "--metrics-port", "0"}); });
  CHECK(child.wait_exit() == 1);
  const auto lines = lines_of(child.err());
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("[sample] [error] cannot start: no archive in " + tmp.path()) != std::string::npos);
  CHECK(child.out().empty());
}

TEST_CASE("a config that does not load ends the service with status 2 and one line", "[service]") {
  TempDir tmp("kiln-service");
  std::ofstream(tmp.path() + "/kiln.yaml") << "scorer:\n  min_sped: 2\n";
  bool made = false;
  ServiceSpec spec = sample_spec();
  spec.make = [&](const service::ServiceContext&) -> Result<service::ServiceHandlers> {
    made = true;  // in the child: seen only through its exit status
    return service::ServiceHandlers{};
  };
  Child child([&] {
    int status = run_service(spec, {"--config", tmp.path() + "/kiln.yaml", "--state-dir", tmp.path()});
    return made ? 98 : status;
  });
  CHECK(child.wait_exit() == 2);
  const auto lines = lines_of(child.err());
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].rfind("kiln-sample: ", 0) == 0);
  CHECK(lines[0].find("scorer.min_sped") != std::string::npos);
}

TEST_CASE("a running worker serves its metrics and pages, says READY, and stops on SIGTERM", "[service]") {
  TempDir tmp("kiln-service");
  const std::string endpoint = "ipc://" + tmp.path() + "/broker.sock";
  // The test's broker never answers: a liveness far above the test's length keeps the worker from giving up
  // on it and reconnecting (a second READY) on a slow machine.
  std::ofstream(tmp.path() + "/kiln.yaml") << "scorer:\n  min_speedup: 1.25\nbroker:\n  heartbeat_liveness: 600\n";
  const std::string stopped_marker = tmp.path() + "/state/on_stop ran";

  ServiceSpec spec = sample_spec();
  spec.make = [](const service::ServiceContext& ctx) -> Result<service::ServiceHandlers> {
    // What the factory was given shows on /metrics: the config it read and where its state lives.
    prometheus::BuildGauge()
        .Name("sample_min_speedup")
        .Help("scorer.min_speedup as the factory saw it")
        .Register(*ctx.metrics)
        .Add({})
        .Set(ctx.config->scorer.min_speedup);
    service::ServiceHandlers h;
    h.job = [](const proto::Job&) { return messaging::JobOutcome::ok(); };
    h.slots = 2;
    h.caps.backend = proto::Backend::kCpu;
    const std::string state_dir = ctx.state_dir;
    h.pages.push_back(
        {"/state/([a-z]+)", "text/plain", [state_dir](const std::vector<std::string>& captures) -> Result<std::string> {
           if (captures.at(0) != "dir") return not_found("no such page");
           return state_dir;
         }});
    h.on_stop = [state_dir] { std::ofstream(state_dir + "/on_stop ran") << "yes"; };
    return h;
  };
  // Forked before the test opens any socket: the child starts from a process with no ZeroMQ threads.
  Child child([&] {
    return run_service(
        spec, {"--config", tmp.path() + "/kiln.yaml", "--state-dir", tmp.path() + "/state", "--broker", endpoint,
               "--worker-id", "sample-w1", "--metrics-host", "127.0.0.1", "--metrics-port", "0"});
  });
  zmq::context_t zctx(1);
  zmq::socket_t router(zctx, zmq::socket_type::router);
  router.bind(endpoint);

  // The line that says the worker runs comes after the signal handlers are installed.
  REQUIRE(child.wait_for_stderr("slot(s)"));
  REQUIRE(child.wait_for_stderr("metrics on :"));
  const std::string& log = child.err();
  const size_t at = log.find("metrics on :") + std::string("metrics on :").size();
  const int port = std::stoi(log.substr(at));
  REQUIRE(port > 0);
  CHECK(log.find("worker sample-w1 for 'score' (2 slot(s)) -> " + endpoint) != std::string::npos);

  auto ready_env = next_message(router, proto::cmd::kReady);
  REQUIRE(ready_env);
  auto ready = proto::decode<proto::Ready>(ready_env->body);
  REQUIRE(ready.is_ok());
  CHECK(ready->service == "score");
  CHECK(ready->worker_id == "sample-w1");
  CHECK(ready->slots == 2);
  CHECK(ready->caps.backend == proto::Backend::kCpu);
  CHECK_FALSE(ready->caps.host.empty());

  httplib::Client http("127.0.0.1", port);
  auto metrics = http.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  CHECK(metrics->body.find("sample_min_speedup 1.25") != std::string::npos);
  auto page = http.Get("/state/dir");
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->body == tmp.path() + "/state");
  auto missing = http.Get("/state/other");
  REQUIRE(missing);
  CHECK(missing->status == 404);

  CHECK_FALSE(std::filesystem::exists(stopped_marker));
  REQUIRE(::kill(child.pid(), SIGTERM) == 0);
  CHECK(next_message(router, proto::cmd::kDisconnect));  // the worker says goodbye to the broker
  CHECK(child.wait_exit() == 0);
  CHECK(std::filesystem::exists(stopped_marker));
  CHECK(child.err().find("[sample] [info] stopped") != std::string::npos);
}
