// Authentication of external bridges (DESIGN §2): the ZAP handler (RFC 27) of the broker's CURVE endpoint
// admits a client whose public key is on the allowlist and names it after its entry; the allowlist is
// re-read on request (SIGHUP) or when its file changes. Also what an admitted bridge may lead its
// results to.
#pragma once

#include <sys/stat.h>
#include <zmq.hpp>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/broker/allowlist.h"
#include "kiln/broker/metrics.h"
#include "kiln/core/status.h"
#include "kiln/proto/wire.h"

namespace kiln::broker {

// The answer to one ZAP request.
struct ZapVerdict {
  std::string_view code;  // "200" admitted, "400" denied, "500" malformed request
  std::string text;
  std::string user;  // the bridge's name when admitted
};

// Judges a ZAP request, given as its frames (version, request id, domain, address, routing id,
// mechanism, credentials...): only CURVE with a listed 32-byte public key is admitted.
ZapVerdict judge_zap_request(const std::vector<std::string>& frames, const Allowlist& allowlist);

// A bridge is trusted to propose code, nothing more: its results may only lead to `allowed` services
// (compile its candidate; tell the scorer a proposal failed, as a result), never e.g. straight to
// "promote". permission_denied says why not.
Status check_bridge_followup(const proto::FollowUp& followup, const std::vector<std::string>& allowed);

class BridgeAuth {
 public:
  // Loads the allowlist at `allowlist_path` (a missing file, or one that does not parse, admits no one:
  // the latter is logged as an error, and a later reload takes the fixed file) and binds the ZAP handler
  // of `context`. Open it before binding the CURVE socket: without a
  // handler, libzmq admits every client. `metrics` must outlive the object.
  static Result<std::unique_ptr<BridgeAuth>> open(zmq::context_t& context, std::string allowlist_path,
                                                  BrokerMetrics& metrics);
  BridgeAuth(const BridgeAuth&) = delete;
  BridgeAuth& operator=(const BridgeAuth&) = delete;

  // The ZAP socket, for the event loop's poll.
  zmq::socket_t& socket() { return zap_; }
  // Answers the ZAP requests waiting (at most a bounded number per call).
  void serve();
  // Re-reads the allowlist; on a parse error keeps the current one and returns false. The caller drops
  // the bridges that are no longer admitted.
  bool reload();
  // Has the file changed (appeared, gone, or another mtime, size or inode) since it was last read?
  bool changed() const;
  // Is a bridge of that name still on the list (a reload may have revoked it)?
  bool admits(const std::string& name) const { return allowlist_.has_name(name); }

 private:
  BridgeAuth(zmq::context_t& context, std::string allowlist_path, BrokerMetrics& metrics);
  void log_denied(const std::string& raw_key, const std::string& address, const std::string& why);

  zmq::socket_t zap_;  // REP on inproc://zeromq.zap.01
  std::string path_;
  BrokerMetrics& metrics_;
  Allowlist allowlist_;
  struct stat stat_ {};
  bool exists_ = false;
  bool loaded_once_ = false;                     // a list was read: a bad file keeps it
  std::map<std::string, double> denied_logged_;  // raw key -> when last logged
};

}  // namespace kiln::broker
