#include "kiln/service/task_source.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "kiln/messaging/outcome.h"

namespace kiln::service {

namespace {
constexpr size_t kMaxParsed = 64;  // packages kept parsed; a worker serves a handful of campaigns at a time
}

Result<std::shared_ptr<const TaskPackage>> TaskSource::resolve(const std::string& blob, const proto::FileMap& files) {
  if (!files.empty() || blob.empty()) {
    if (files.empty()) return messaging::job_fault(invalid_argument("the job carries no task package"));
    // Inline packages are kept by their task id, which is the name their blob has: a campaign whose jobs
    // carry the files, or name them, or both, is parsed once.
    const std::string key = proto::task_id(files);
    if (auto hit = cached(key)) return hit;
    return keep(key, TaskPackage{"", files, {}}, "task package");
  }
  if (auto hit = cached(blob)) return hit;
  if (!blobs_)
    return messaging::job_fault(
        invalid_argument("the job names task blob " + blob + " and this worker has no blob store"));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const std::string> data, blobs_->get(blob));
  auto decoded = proto::decode<proto::TaskFiles>(*data);
  if (!decoded.is_ok()) return messaging::job_fault(decoded.status().with_context("task blob " + blob));
  return keep(blob, TaskPackage{blob, std::move(decoded->files), {}}, "task package (blob " + blob + ")");
}

std::shared_ptr<const TaskPackage> TaskSource::cached(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = parsed_.find(key);
  return it == parsed_.end() ? nullptr : it->second;
}

Result<std::shared_ptr<const TaskPackage>> TaskSource::keep(const std::string& key, TaskPackage package,
                                                            const std::string& what) {
  auto spec = task::parse_task(package.files);
  if (!spec.is_ok()) return messaging::job_fault(spec.status().with_context(what));
  package.spec = std::move(spec).value();
  auto pkg = std::make_shared<const TaskPackage>(std::move(package));
  std::lock_guard lock(mu_);
  if (parsed_.size() >= kMaxParsed) parsed_.erase(parsed_.begin());
  parsed_.emplace(key, pkg);
  return pkg;
}

Result<std::shared_ptr<const std::string>> TaskSource::content(const std::string& blob,
                                                               const std::string& inline_data) {
  if (!inline_data.empty() || blob.empty()) return std::make_shared<const std::string>(inline_data);
  if (!blobs_)
    return messaging::job_fault(invalid_argument("the job names blob " + blob + " and this worker has no blob store"));
  return blobs_->get(blob);
}

std::string TaskSource::publish(const proto::FileMap& files) {
  if (!blobs_) return "";
  return publish_bytes(proto::task_blob_bytes(files));
}

std::string TaskSource::publish_bytes(const std::string& data) {
  if (!blobs_) return "";
  auto name = blobs_->put(data);
  if (!name.is_ok()) {
    spdlog::warn("blob store: {} (the job carries its content instead)", name.status().message());
    return "";
  }
  return std::move(name).value();
}

}  // namespace kiln::service
