#include "kiln/messaging/worker.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/core/time.h"

namespace kiln::messaging {

namespace {

// An eventfd that worker threads write to wake the I/O loop's zmq::poll.
class WakeFd {
 public:
  WakeFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~WakeFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  WakeFd(const WakeFd&) = delete;
  WakeFd& operator=(const WakeFd&) = delete;
  int fd() const { return fd_; }
  void notify() {
    uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
  }
  void drain() {
    uint64_t v;
    while (::read(fd_, &v, sizeof v) > 0) {
    }
  }

 private:
  int fd_;
};

struct Done {
  proto::ResultMsg result;
};

}  // namespace

struct Worker::Impl {
  zmq::context_t& ctx;
  WorkerOptions opt;
  JobHandler job_handler;
  RequestHandler request_handler;
  WorkerStats& stats;

  std::unique_ptr<zmq::socket_t> socket;
  WakeFd wake;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<proto::Job> pending;  // jobs waiting for a thread
  std::deque<Done> done;           // results waiting for the I/O thread
  int running = 0;
  bool shutting_down = false;
  const std::atomic<bool>* stop = nullptr;  // run()'s flag, read by the pool threads
  std::vector<std::thread> pool;

  double last_recv = 0;
  double last_send = 0;

  Impl(zmq::context_t& c, WorkerOptions o, JobHandler j, RequestHandler r, WorkerStats& s)
      : ctx(c), opt(std::move(o)), job_handler(std::move(j)), request_handler(std::move(r)), stats(s) {}

  void connect() {
    socket = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    apply_options(*socket, opt.socket);
    socket->connect(opt.endpoint);
    proto::Ready ready{opt.service, opt.worker_id, opt.slots, opt.caps, opt.heartbeat_interval_s};
    send(proto::cmd::kReady, proto::encode(ready));
    last_recv = monotonic_s();
  }

  void send(std::string_view command, const std::string& body) {
    Status st = send_envelope(*socket, "", command, body);
    if (!st.is_ok()) spdlog::warn("worker {}: send {} failed: {}", opt.worker_id, command, st.message());
    last_send = monotonic_s();
  }

  void thread_main() {
    while (true) {
      proto::Job job;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return shutting_down || !pending.empty(); });
        if (pending.empty()) return;
        job = std::move(pending.front());
        pending.pop_front();
        ++running;
      }
      JobOutcome out;
      try {
        out = job_handler(job);
      } catch (const std::exception& e) {
        out = JobOutcome::retry(std::string("handler threw: ") + e.what());
      } catch (...) {
        out = JobOutcome::retry("handler threw an unknown exception");
      }
      const bool withheld = withheld_on_stop(job, out);
      Done d;
      if (!withheld) d.result = to_result(job, std::move(out));
      {
        std::lock_guard lock(mu);
        if (!withheld) done.push_back(std::move(d));
        --running;
      }
      wake.notify();
    }
  }

  // A job that fails once the worker is stopping is given back, never judged: the signal that stops the
  // worker may have reached the job's own children too (cancelling a Slurm job signals every process of its
  // steps), and a compiler or candidate killed that way is no fault of the candidate. No RESULT is sent: the
  // DISCONNECT that follows gives the job back once. (A RESULT "retry" would free the slot, and the broker
  // would lease the job again to this very worker, and requeue it again at the DISCONNECT: two attempts.)
  bool withheld_on_stop(const proto::Job& job, const JobOutcome& out) const {
    if (out.outcome == Outcome::kDone || stop == nullptr || !stop->load()) return false;
    spdlog::info("worker {}: job {} given back: it ended while the worker was stopping ({})", opt.worker_id, job.job_id,
                 out.error);
    return true;
  }

  void flush_done() {
    std::deque<Done> ready;
    {
      std::lock_guard lock(mu);
      ready.swap(done);
    }
    for (auto& d : ready) {
      send(proto::cmd::kResult, proto::encode(d.result));
      stats.jobs_done++;
    }
  }

  void handle(const Envelope& env) {
    using namespace proto::cmd;
    if (env.command == kJob) {
      auto job = proto::decode<proto::Job>(env.body);
      if (!job.is_ok()) {
        stats.rejected_frames++;
        spdlog::warn("worker {}: rejected JOB: {}", opt.worker_id, job.status().message());
        return;
      }
      // A stopping worker starts nothing more: the DISCONNECT gives the job back.
      if (stop != nullptr && stop->load()) return;
      {
        std::lock_guard lock(mu);
        pending.push_back(std::move(job).value());
      }
      cv.notify_one();
    } else if (env.command == kRequest) {
      auto req = proto::decode<proto::Request>(env.body);
      if (!req.is_ok()) {
        stats.rejected_frames++;
        return;
      }
      proto::Reply reply;
      reply.request_id = req->request_id;
      if (!request_handler) {
        reply.error = "service '" + opt.service + "' answers no requests";
      } else {
        Result<std::string> r = [&]() -> Result<std::string> {
          try {
            return request_handler(*req);
          } catch (const std::exception& e) {
            return internal_error(std::string("request handler threw: ") + e.what());
          }
        }();
        if (r.is_ok()) {
          reply.ok = true;
          reply.body = proto::Bytes{std::move(r).value()};
        } else {
          reply.error = r.status().message();
        }
      }
      send(kReply, proto::encode(reply));
      stats.requests_answered++;
    } else if (env.command == kDisconnect) {
      auto d = proto::decode<proto::Disconnect>(env.body);
      spdlog::info("worker {}: broker asked to reconnect ({})", opt.worker_id,
                   d.is_ok() ? d->reason : std::string("no reason"));
      reconnect_now = true;
    } else if (env.command == kHeartbeat) {
      // any message counts; nothing else to do
    } else if (env.command == kAck) {
      // The broker refused our READY or a RESULT (whose job it has released already): say why, once.
      auto ack = proto::decode<proto::Ack>(env.body);
      if (!ack.is_ok()) {
        stats.rejected_frames++;
        return;
      }
      if (!ack->error.empty()) {
        stats.refusals++;
        spdlog::warn("worker {}: the broker refused {}: {}", opt.worker_id,
                     ack->job_id.empty() ? std::string("a message") : "the result for " + ack->job_id, ack->error);
      }
    } else {
      stats.rejected_frames++;
    }
  }

  bool reconnect_now = false;
};

Worker::Worker(zmq::context_t& context, WorkerOptions options, JobHandler job_handler, RequestHandler request_handler)
    : impl_(std::make_unique<Impl>(context, std::move(options), std::move(job_handler), std::move(request_handler),
                                   stats_)) {}

Worker::~Worker() = default;

void Worker::run(const std::atomic<bool>& stop, double drain_timeout_s) {
  Impl& m = *impl_;
  m.stop = &stop;
  for (int i = 0; i < std::max(1, m.opt.slots); ++i) m.pool.emplace_back([&m] { m.thread_main(); });
  m.connect();
  double backoff = m.opt.reconnect_min_s;
  const double dead_after = m.opt.heartbeat_interval_s * m.opt.heartbeat_liveness;
  auto poll_once = [&](long timeout_ms) {
    zmq::pollitem_t items[] = {{static_cast<void*>(*m.socket), 0, ZMQ_POLLIN, 0},
                               {nullptr, m.wake.fd(), ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(timeout_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;  // a signal (SIGTERM) interrupted the wait: the loop checks `stop`
    }
    if (items[1].revents & ZMQ_POLLIN) m.wake.drain();
    m.flush_done();
    while (true) {
      auto env = recv_envelope(*m.socket, false);
      if (!env) break;
      if (!env->is_ok()) {
        m.stats.rejected_frames++;
        continue;
      }
      m.last_recv = monotonic_s();
      backoff = m.opt.reconnect_min_s;
      m.handle(env->value());
    }
  };

  while (!stop.load()) {
    long timeout_ms = static_cast<long>(m.opt.heartbeat_interval_s * 1000 / 2);
    poll_once(std::max(10L, timeout_ms));
    double now = monotonic_s();
    if (now - m.last_send >= m.opt.heartbeat_interval_s)
      m.send(proto::cmd::kHeartbeat, proto::encode(proto::Heartbeat{}));
    if (m.reconnect_now || now - m.last_recv > dead_after) {
      if (!m.reconnect_now) {
        spdlog::warn("worker {}: broker silent for {:.1f} s, reconnecting in {:.0f} s", m.opt.worker_id,
                     now - m.last_recv, backoff);
        // Back off before the fresh socket, but keep flushing results and watching `stop`.
        double until = monotonic_s() + backoff;
        while (!stop.load() && monotonic_s() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        backoff = std::min(backoff * 2, m.opt.reconnect_max_s);
      }
      m.reconnect_now = false;
      m.stats.reconnects++;
      m.connect();
    }
  }

  // Stop: tell the broker, finish running jobs (their results still count), then leave.
  {
    std::lock_guard lock(m.mu);
    m.pending.clear();  // not started: the broker requeues them when we disconnect
  }
  double until = monotonic_s() + drain_timeout_s;
  while (monotonic_s() < until) {
    {
      std::lock_guard lock(m.mu);
      if (m.running == 0 && m.done.empty()) break;
    }
    poll_once(50);
  }
  m.flush_done();
  m.send(proto::cmd::kDisconnect, proto::encode(proto::Disconnect{"worker stopping"}));
  {
    std::lock_guard lock(m.mu);
    m.shutting_down = true;
  }
  m.cv.notify_all();
  // A handler still running past the drain timeout is waited for; its result is not sent and the broker
  // requeues the job. (A supervisor that cannot wait kills the process, with the same effect.)
  for (auto& t : m.pool)
    if (t.joinable()) t.join();
  m.pool.clear();
  m.socket->close();
}

}  // namespace kiln::messaging
