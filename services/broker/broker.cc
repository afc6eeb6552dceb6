#include "kiln/broker/broker.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "kiln/broker/bridge_auth.h"
#include "kiln/broker/commands.h"
#include "kiln/broker/job_queue.h"
#include "kiln/broker/job_table.h"
#include "kiln/broker/retention.h"
#include "kiln/core/time.h"
#include "kiln/messaging/curve.h"
#include "kiln/messaging/frames.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"

namespace kiln::broker {

namespace {

// The broker's sockets take frames up to this many times max_message_bytes, so a frame somewhat over the
// limit is read, counted and answered rather than silently dropped with its connection by ZeroMQ.
constexpr int64_t kTransportSlack = 2;
// Messages read per socket per loop turn, so timers still run under a flood.
constexpr int kDrainBatch = 1000;
constexpr double kAllowlistCheck_s = 1.0;  // a stat() per second: edits apply without a SIGHUP too
constexpr long kMinTick_ms = 10;

}  // namespace

// The event loop: owns the sockets, reads what arrives and hands it to the commands, writes what the
// commands and the job queue send, publishes job events, and runs the timers.
struct Broker::Impl final : Outbox, QueueListener {
  zmq::context_t& ctx;
  std::shared_ptr<prometheus::Registry> registry;  // outlives the metrics registered on it
  BrokerOptions opt;
  BrokerMetrics metrics;
  JobQueue queue;
  TableRetention retention;
  Commands commands;
  std::unique_ptr<zmq::socket_t> router;
  std::unique_ptr<zmq::socket_t> pub;
  std::unique_ptr<zmq::socket_t> external;  // CURVE ROUTER for external bridges
  std::unique_ptr<BridgeAuth> auth;         // its ZAP handler (declared after it: closed first)
  // PAIR sockets receiving the ROUTERs' disconnect events (declared after them: closed first).
  std::unique_ptr<zmq::socket_t> router_monitor;
  std::unique_ptr<zmq::socket_t> external_monitor;
  std::string endpoint;
  std::string events_endpoint;
  std::string external_endpoint;
  uint64_t event_seq = 0;

  Impl(zmq::context_t& c, BrokerOptions o, JobTable table, std::shared_ptr<prometheus::Registry> r)
      : ctx(c),
        registry(std::move(r)),
        opt(std::move(o)),
        metrics(*registry),
        queue(std::move(table), opt, metrics, monotonic_s),
        retention(queue.table(), opt.retention, opt.retention_interval_s, metrics),
        commands(opt, queue, metrics, *this) {
    queue.set_listener(this);
  }
  ~Impl() override { queue.set_listener(nullptr); }

  // ------------------------------------------------------------------------------------ output

  Status send_raw(const std::string& peer, std::string_view command, const std::string& body) {
    zmq::socket_t* socket = is_external(peer) ? external.get() : router.get();
    if (socket == nullptr || peer.size() < 2) return unavailable("no socket for peer");
    metrics.bytes_sent(command, body.size());
    return messaging::send_envelope(*socket, std::string_view(peer).substr(1), command, body);
  }

  void send(const std::string& peer, std::string_view command, const std::string& body) override {
    Status st = send_raw(peer, command, body);
    if (!st.is_ok()) {
      spdlog::debug("send {} to {} failed: {}", command, printable_peer(peer), st.message());
      if (queue.worker(peer) != nullptr) queue.remove_worker(peer, "unreachable");
      return;
    }
    queue.wrote_to(peer);
  }

  void deliver(const std::string& identity, const proto::Job& job) override {
    send(identity, proto::cmd::kJob, proto::encode(job));
  }

  void worker_removed(const std::string& identity) override { commands.fail_requests_to(identity); }

  // Events are best effort: nothing that must not be lost rides on them.
  void job_state(const std::string& job_id, const std::string& service, std::string_view state, int attempt) override {
    if (!pub) return;
    proto::JobStatus ev;
    ev.job_id = job_id;
    ev.service = service;
    ev.state = std::string(state);
    ev.attempt = attempt;
    std::string topic = "job." + std::string(state);
    std::string seq = std::to_string(++event_seq);
    try {
      pub->send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      pub->send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      pub->send(zmq::buffer(proto::encode(ev)), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
    }
  }

  // ------------------------------------------------------------------------------------ input

  // ZeroMQ drops, without telling the application, a peer whose frame exceeds ZMQ_MAXMSGSIZE; the
  // monitor's disconnect events are where that shows (with every other closed connection).
  std::unique_ptr<zmq::socket_t> monitor(zmq::socket_t& socket, const char* name) {
    const std::string address =
        "inproc://kiln-broker-" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" + name;
    if (zmq_socket_monitor(static_cast<void*>(socket), address.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) {
      spdlog::warn("broker: no disconnect events for the {} endpoint: {}", name, zmq_strerror(zmq_errno()));
      return nullptr;
    }
    auto pair = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pair);
    pair->set(zmq::sockopt::linger, 0);
    pair->connect(address);
    return pair;
  }

  void drain_monitor(zmq::socket_t* pair, const char* endpoint_label) {
    if (pair == nullptr) return;
    for (int i = 0; i < kDrainBatch; ++i) {
      zmq::message_t event, address;
      try {
        if (!pair->recv(event, zmq::recv_flags::dontwait)) return;
        if (event.more()) (void)pair->recv(address, zmq::recv_flags::none);
      } catch (const zmq::error_t&) {
        return;
      }
      metrics.disconnect(endpoint_label);
    }
  }

  // Reads what is readable on one ROUTER, bounded so timers still run under a flood.
  void drain(zmq::socket_t& socket, char tag) {
    for (int i = 0; i < kDrainBatch; ++i) {
      std::string identity;
      auto env = messaging::recv_envelope(socket, true, &identity);
      if (!env) break;
      std::string peer = tag + identity;
      if (!env->is_ok()) {
        commands.reject(peer, Rejection::kMalformed, env->status().message());
        continue;
      }
      messaging::Envelope& e = env->value();
      metrics.bytes_received(e.command, e.body.size());
      e.identity = std::move(peer);
      if (tag == kExternalTag) {
        // The ZAP handler put the bridge name on the connection. A name no longer on the list was
        // revoked by a reload: its open connection gets nothing more.
        if (e.user_id.empty() || !auth->admits(e.user_id)) {
          commands.reject(e.identity, Rejection::kRevoked,
                          "bridge '" + e.user_id + "' is not on the allowlist (revoked?)");
          queue.remove_worker(e.identity, "bridge revoked");
          continue;
        }
        metrics.bridge_message(e.user_id);
      } else {
        e.user_id.clear();  // only the CURVE endpoint has a ZAP handler behind it
      }
      if (static_cast<int64_t>(e.body.size()) > opt.max_message_bytes) {
        commands.refuse_oversized(e);
        continue;
      }
      commands.handle(e);
    }
  }

  // Re-reads the allowlist (keeping the current one when the file does not parse) and drops the bridges
  // no longer on it.
  void reload_allowlist() {
    if (!auth->reload()) return;
    std::vector<std::string> revoked;
    for (const auto& [id, w] : queue.workers())
      if (!w.bridge.empty() && !auth->admits(w.bridge)) revoked.push_back(id);
    for (const auto& id : revoked) queue.remove_worker(id, "bridge revoked");
  }

  void check_timers() {
    commands.flush_logs();
    queue.flush_logs();
    queue.check_timers();
    retention.tick(monotonic_s(), wall_time_s());
    commands.expire_requests();
    for (const auto& id : queue.heartbeats_due()) send(id, proto::cmd::kHeartbeat, proto::encode(proto::Heartbeat{}));
  }

  Status open_external();
};

Status Broker::Impl::open_external() {
  if (!messaging::curve_available()) return failed_precondition("this libzmq was built without CURVE");
  KILN_RETURN_IF_ERROR(messaging::decode_curve_key(opt.curve_secret_key).status().with_context("server secret key"));
  // The ZAP handler must be bound before the CURVE socket: without one, libzmq admits every client.
  auto opened = BridgeAuth::open(ctx, opt.allowlist_path, metrics);
  if (!opened.is_ok()) return opened.status();
  auth = std::move(opened).value();
  messaging::SocketOptions so;
  so.max_message_bytes = opt.max_message_bytes * kTransportSlack;
  try {
    external = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
    messaging::apply_options(*external, so);
    external->set(zmq::sockopt::router_mandatory, 1);
    external->set(zmq::sockopt::curve_server, 1);
    external->set(zmq::sockopt::curve_secretkey, opt.curve_secret_key);
    external->set(zmq::sockopt::zap_domain, "kiln.bridges");
    external->bind(opt.external_bind);
    external_endpoint = external->get(zmq::sockopt::last_endpoint);
    external_monitor = monitor(*external, "external");
  } catch (const zmq::error_t& e) {
    return unavailable("cannot bind " + opt.external_bind + ": " + e.what());
  }
  return Status::ok();
}

Broker::Broker() = default;
Broker::~Broker() = default;

Result<std::unique_ptr<Broker>> Broker::create(zmq::context_t& context, BrokerOptions options,
                                               std::shared_ptr<prometheus::Registry> metrics) {
  auto table = JobTable::open(options.db_path, options.max_table_bytes);
  if (!table.is_ok()) return table.status().with_context("broker: job table " + options.db_path);
  auto active = table->load_active();
  if (!active.is_ok()) return active.status().with_context("broker: loading jobs");
  table->set_write_fault(options.store_write_fault);
  std::unique_ptr<Broker> b(new Broker());
  b->impl_ = std::make_unique<Impl>(context, std::move(options), std::move(table).value(), std::move(metrics));
  Impl& m = *b->impl_;
  messaging::SocketOptions so;
  so.max_message_bytes = m.opt.max_message_bytes * kTransportSlack;
  try {
    m.router = std::make_unique<zmq::socket_t>(context, zmq::socket_type::router);
    messaging::apply_options(*m.router, so);
    m.router->set(zmq::sockopt::router_mandatory, 1);
    m.router->bind(m.opt.bind);
    m.endpoint = m.router->get(zmq::sockopt::last_endpoint);
    m.router_monitor = m.monitor(*m.router, "internal");
    if (!m.opt.events_bind.empty()) {
      m.pub = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pub);
      m.pub->set(zmq::sockopt::linger, 0);
      m.pub->bind(m.opt.events_bind);
      m.events_endpoint = m.pub->get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return unavailable("broker: cannot bind " + m.opt.bind + ": " + e.what());
  }
  if (!m.opt.external_bind.empty()) KILN_RETURN_IF_ERROR(m.open_external().with_context("broker: external endpoint"));
  // Jobs that were leased when the broker stopped go back to the queue: their workers are gone.
  const size_t n_active = active->size();
  const size_t requeued = m.queue.resume(std::move(active).value());
  if (n_active > 0)
    spdlog::info("broker: resumed {} job(s) from {} ({} were leased)", n_active, m.opt.db_path, requeued);
  return b;
}

const std::string& Broker::endpoint() const { return impl_->endpoint; }
const std::string& Broker::events_endpoint() const { return impl_->events_endpoint; }
const std::string& Broker::external_endpoint() const { return impl_->external_endpoint; }
const BrokerCounters& Broker::counters() const { return impl_->metrics.counters(); }

void Broker::run(const std::atomic<bool>& stop, std::atomic<bool>* reload_allowlist) {
  Impl& m = *impl_;
  spdlog::info("broker: serving on {}", m.endpoint);
  if (m.external) spdlog::info("broker: external bridges (CURVE) on {}", m.external_endpoint);
  double next_timers = 0, next_allowlist_check = 0;
  while (!stop.load()) {
    zmq::pollitem_t items[5] = {{static_cast<void*>(*m.router), 0, ZMQ_POLLIN, 0}};
    int n_items = 1;
    if (m.external) {
      items[n_items++] = {static_cast<void*>(*m.external), 0, ZMQ_POLLIN, 0};
      items[n_items++] = {static_cast<void*>(m.auth->socket()), 0, ZMQ_POLLIN, 0};
    }
    for (zmq::socket_t* pair : {m.router_monitor.get(), m.external_monitor.get()})
      if (pair != nullptr) items[n_items++] = {static_cast<void*>(*pair), 0, ZMQ_POLLIN, 0};
    const long tick_ms = std::max(kMinTick_ms, static_cast<long>(m.queue.shortest_heartbeat_s() * 1000 / 4));
    try {
      zmq::poll(items, n_items, std::chrono::milliseconds(tick_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;  // a signal (SIGHUP, SIGTERM): the checks below run now
    }
    if (m.external) {
      double now = monotonic_s();
      bool asked = reload_allowlist != nullptr && reload_allowlist->exchange(false);
      if (asked || (now >= next_allowlist_check && m.auth->changed())) m.reload_allowlist();
      if (now >= next_allowlist_check) next_allowlist_check = now + kAllowlistCheck_s;
      m.auth->serve();
    }
    m.drain(*m.router, kInternalTag);
    if (m.external) m.drain(*m.external, kExternalTag);
    m.drain_monitor(m.router_monitor.get(), "internal");
    m.drain_monitor(m.external_monitor.get(), "external");
    m.queue.dispatch();
    double now = monotonic_s();
    if (now >= next_timers) {
      m.check_timers();
      m.queue.dispatch();
      next_timers = now + tick_ms / 1000.0;
    }
  }
  // Tell workers we are going so they reconnect promptly to the next broker.
  for (const auto& [id, w] : m.queue.workers())
    (void)m.send_raw(id, proto::cmd::kDisconnect, proto::encode(proto::Disconnect{"broker stopping"}));
  const auto& c = m.metrics.counters();
  spdlog::info("broker: stopped ({} jobs completed; {} bytes in, {} bytes out)", c.completed.load(), c.bytes_in.load(),
               c.bytes_out.load());
}

}  // namespace kiln::broker
