#include "kiln/broker/bridge_auth.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "kiln/core/time.h"
#include "kiln/messaging/curve.h"
#include "kiln/proto/payloads.h"

namespace kiln::broker {

namespace {

// ZAP (RFC 27) status codes.
constexpr std::string_view kZapOk = "200";
constexpr std::string_view kZapDenied = "400";
constexpr std::string_view kZapError = "500";
constexpr size_t kZapMaxFrames = 16;
constexpr int kZapMaxPerServe = 100;         // requests answered per call, so a flood cannot starve the loop
constexpr double kDeniedLogInterval_s = 10;  // a refused bridge retries every second: log it less often
constexpr size_t kDeniedLogMaxKeys = 1024;

}  // namespace

ZapVerdict judge_zap_request(const std::vector<std::string>& frames, const Allowlist& allowlist) {
  ZapVerdict v{kZapOk, "OK", ""};
  if (frames.size() < 7 || frames[0] != "1.0") {
    v.code = kZapError;
    v.text = "malformed ZAP request";
  } else if (frames[5] != "CURVE" || frames[6].size() != 32) {
    v.code = kZapDenied;
    v.text = "CURVE required";
  } else {
    v.user = allowlist.name_of(frames[6]);
    if (v.user.empty()) {
      v.code = kZapDenied;
      v.text = "key not on the allowlist";
    }
  }
  return v;
}

Status check_bridge_followup(const proto::FollowUp& f, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), f.service) == allowed.end())
    return permission_denied("follow-up to '" + f.service + "' is not open to bridges");
  if (f.service == proto::svc::kScore) {
    auto kind = proto::peek_string(f.payload.data, "kind");
    if (!kind.is_ok() || *kind != proto::kind::kResult)
      return permission_denied("a follow-up to 'score' from a bridge must be a result");
  }
  return Status::ok();
}

BridgeAuth::BridgeAuth(zmq::context_t& context, std::string allowlist_path, BrokerMetrics& metrics)
    : zap_(context, zmq::socket_type::rep), path_(std::move(allowlist_path)), metrics_(metrics) {}

Result<std::unique_ptr<BridgeAuth>> BridgeAuth::open(zmq::context_t& context, std::string allowlist_path,
                                                     BrokerMetrics& metrics) {
  if (allowlist_path.empty()) return invalid_argument("no allowlist path");
  std::unique_ptr<BridgeAuth> auth;
  try {
    auth.reset(new BridgeAuth(context, std::move(allowlist_path), metrics));
    auth->zap_.set(zmq::sockopt::linger, 0);
    auth->zap_.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("cannot bind the ZAP handler (another broker in this context?): ") + e.what());
  }
  auth->reload();  // a list that does not parse admits no one until it does: logged, not fatal
  return auth;
}

void BridgeAuth::serve() {
  for (int i = 0; i < kZapMaxPerServe; ++i) {
    std::vector<std::string> frames;
    try {
      zmq::message_t msg;
      if (!zap_.recv(msg, zmq::recv_flags::dontwait)) return;
      while (true) {
        if (frames.size() < kZapMaxFrames) frames.emplace_back(static_cast<const char*>(msg.data()), msg.size());
        if (!msg.more()) break;
        (void)zap_.recv(msg, zmq::recv_flags::none);
      }
    } catch (const zmq::error_t& e) {
      spdlog::error("ZAP handler: recv failed: {}", e.what());
      return;
    }
    const std::string request_id = frames.size() > 1 ? frames[1] : std::string();
    const std::string address = frames.size() > 3 ? frames[3] : std::string();
    ZapVerdict v = judge_zap_request(frames, allowlist_);
    if (v.code != kZapOk) {
      metrics_.bridge_auth_failure();
      log_denied(frames.size() > 6 ? frames[6] : std::string(), address, v.text);
    }
    try {
      zap_.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
      zap_.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
      zap_.send(zmq::buffer(v.code), zmq::send_flags::sndmore);
      zap_.send(zmq::buffer(v.text), zmq::send_flags::sndmore);
      zap_.send(zmq::buffer(v.user), zmq::send_flags::sndmore);
      zap_.send(zmq::message_t(), zmq::send_flags::none);  // no metadata
    } catch (const zmq::error_t& e) {
      spdlog::error("ZAP handler: reply failed: {}", e.what());
    }
  }
}

void BridgeAuth::log_denied(const std::string& raw_key, const std::string& address, const std::string& why) {
  double now = monotonic_s();
  auto it = denied_logged_.find(raw_key);
  if (it != denied_logged_.end() && now - it->second < kDeniedLogInterval_s) return;
  if (denied_logged_.size() >= kDeniedLogMaxKeys) denied_logged_.clear();
  denied_logged_[raw_key] = now;
  std::string key = messaging::encode_curve_key(raw_key);
  spdlog::warn("external endpoint: refused {} ({}){}", address.empty() ? "a client" : address, why,
               key.empty() ? "" : "; its public key is " + key);
}

bool BridgeAuth::reload() {
  struct stat st {};
  exists_ = ::stat(path_.c_str(), &st) == 0;
  stat_ = st;
  auto loaded = Allowlist::load(path_);
  if (!loaded.is_ok()) {
    if (loaded_once_)
      spdlog::error("allowlist not reloaded, keeping the previous {} key(s): {}", allowlist_.size(),
                    loaded.status().message());
    else
      spdlog::error("allowlist not loaded, no bridge admitted until it is fixed: {}", loaded.status().message());
    return false;
  }
  loaded_once_ = true;
  allowlist_ = std::move(loaded).value();
  metrics_.allowlist_loaded(allowlist_.size());
  spdlog::info("external bridges: {} key(s) on the allowlist {}{}", allowlist_.size(), path_,
               exists_ ? "" : " (file absent: no bridge admitted)");
  return true;
}

bool BridgeAuth::changed() const {
  struct stat st {};
  bool exists = ::stat(path_.c_str(), &st) == 0;
  if (exists != exists_) return true;
  return exists && (st.st_mtim.tv_sec != stat_.st_mtim.tv_sec || st.st_mtim.tv_nsec != stat_.st_mtim.tv_nsec ||
                    st.st_size != stat_.st_size || st.st_ino != stat_.st_ino);
}

}  // namespace kiln::broker
