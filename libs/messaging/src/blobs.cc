#include "kiln/messaging/blobs.h"

#include <utility>

#include "kiln/core/hash.h"
#include "kiln/messaging/client.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"

namespace kiln::messaging {

BlobClient::BlobClient(Transport transport, size_t cache_bytes)
    : transport_(std::move(transport)), cache_limit_(cache_bytes) {}

std::shared_ptr<BlobClient> BlobClient::connect(zmq::context_t& context, std::string endpoint, SocketOptions options,
                                                double timeout_s) {
  // The socket is made on first use and used under the BlobClient's lock only.
  auto client = std::make_shared<std::unique_ptr<Client>>();
  return std::make_shared<BlobClient>([&context, endpoint = std::move(endpoint), options, timeout_s, client](
                                          std::string_view method, const std::string& body) -> Result<std::string> {
    if (!*client) *client = std::make_unique<Client>(context, endpoint, options);
    return (*client)->request(std::string(proto::svc::kBroker), std::string(method), body, timeout_s);
  });
}

Result<std::string> BlobClient::put(const std::string& data) {
  std::string name = sha256_hex(data);
  std::lock_guard lock(mu_);
  if (put_.count(name)) return name;
  // Several workers put the same content (each compiler its build of a task's reference): it travels once.
  if (transport_(proto::blob_method::kHas, proto::encode(proto::BlobQuery{name})).is_ok()) {
    put_.insert(name);
    return name;
  }
  KILN_RETURN_IF_ERROR(transport_(proto::blob_method::kPut, proto::encode(proto::Blob{name, proto::Bytes{data}}))
                           .status()
                           .with_context("blob store"));
  put_.insert(name);
  remember(name, std::make_shared<const std::string>(data));
  return name;
}

Result<std::shared_ptr<const std::string>> BlobClient::get(const std::string& sha256) {
  std::lock_guard lock(mu_);
  if (auto it = cache_.find(sha256); it != cache_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.second);
    return it->second.first;
  }
  ++fetches_;
  auto reply = transport_(proto::blob_method::kGet, proto::encode(proto::BlobQuery{sha256}));
  if (!reply.is_ok()) return unavailable("blob store: " + reply.status().message());
  auto blob = proto::decode<proto::Blob>(*reply);
  if (!blob.is_ok()) return unavailable("blob store: a bad reply: " + blob.status().message());
  if (blob->sha256 != sha256 || sha256_hex(blob->data.data) != sha256)
    return unavailable("blob store: the content sent for " + sha256 + " does not hash to it");
  auto data = std::make_shared<const std::string>(std::move(blob->data.data));
  remember(sha256, data);
  return data;
}

size_t BlobClient::fetches() const {
  std::lock_guard lock(mu_);
  return fetches_;
}

void BlobClient::remember(const std::string& sha256, std::shared_ptr<const std::string> data) {
  if (data->size() > cache_limit_ || cache_.count(sha256)) return;
  cache_bytes_ += data->size();
  lru_.push_front(sha256);
  cache_.emplace(sha256, std::make_pair(std::move(data), lru_.begin()));
  while (cache_bytes_ > cache_limit_ && !lru_.empty()) {
    auto victim = cache_.find(lru_.back());
    cache_bytes_ -= victim->second.first->size();
    cache_.erase(victim);
    lru_.pop_back();
  }
}

}  // namespace kiln::messaging
