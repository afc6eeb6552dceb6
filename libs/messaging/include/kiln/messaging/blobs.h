// Content named by its sha256 through the broker's blob store (proto::Blob, "blob.put" / "blob.get"): a job
// names a task package or a built reference instead of carrying it, and each process fetches a name once.
// Thread-safe; fetched content is checked against its name and kept in a bounded cache.
#pragma once

#include <zmq.hpp>

#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "kiln/core/status.h"
#include "kiln/messaging/frames.h"

namespace kiln::messaging {

class BlobClient {
 public:
  // Sends one broker query (method, encoded body) and returns the reply body. Called under the client's lock.
  using Transport = std::function<Result<std::string>(std::string_view method, const std::string& body)>;

  explicit BlobClient(Transport transport, size_t cache_bytes = kDefaultCacheBytes);
  // A client of the broker at `endpoint` (its own socket, made on first use).
  static std::shared_ptr<BlobClient> connect(zmq::context_t& context, std::string endpoint, SocketOptions options = {},
                                             double timeout_s = 10.0);

  // Stores `data` in the broker (once per name per process) and returns its name.
  Result<std::string> put(const std::string& data);
  // The content named `sha256`: from the cache, else fetched and checked. An unreachable broker or a name
  // it does not hold is kUnavailable (a job waiting on it is retried).
  Result<std::shared_ptr<const std::string>> get(const std::string& sha256);

  size_t fetches() const;  // gets that went to the broker

  static constexpr size_t kDefaultCacheBytes = 64u << 20;

 private:
  mutable std::mutex mu_;
  Transport transport_;
  size_t cache_limit_;
  size_t cache_bytes_ = 0;
  std::list<std::string> lru_;  // most recent first
  std::map<std::string, std::pair<std::shared_ptr<const std::string>, std::list<std::string>::iterator>> cache_;
  std::set<std::string> put_;
  size_t fetches_ = 0;

  void remember(const std::string& sha256, std::shared_ptr<const std::string> data);
};

}  // namespace kiln::messaging
