// The task package a job names (DESIGN §1): jobs carry the package's files, or the name of a blob of the
// broker's store that holds them (proto::TaskFiles). A TaskSource hands a worker the package either way,
// parsed once per process, and names packages for the jobs a worker makes.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/core/status.h"
#include "kiln/messaging/blobs.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace kiln::service {

struct TaskPackage {
  std::string blob;  // its name in the blob store ("" when it came inline and was never published)
  proto::FileMap files;
  task::TaskSpec spec;
};

class TaskSource {
 public:
  // `blobs` null: packages travel inline only (a job that names a blob is then a job fault).
  explicit TaskSource(std::shared_ptr<messaging::BlobClient> blobs = nullptr) : blobs_(std::move(blobs)) {}

  // The package of a job that carries `files`, or else names `blob`, parsed the first time it is seen (by
  // name or content) and kept. A fetch that fails is kUnavailable (retry); a package that does not parse
  // or is missing is the job's fault (kFailedPrecondition).
  Result<std::shared_ptr<const TaskPackage>> resolve(const std::string& blob, const proto::FileMap& files);

  // Names `files` for a job: puts the package in the blob store once and returns its name, which is
  // proto::task_id(files), or "" when there is no blob store or the put failed (the job then carries the
  // files; nothing is lost).
  std::string publish(const proto::FileMap& files);

  // Puts built content (a reference library) in the blob store; "" as for publish().
  std::string publish_bytes(const std::string& data);
  // Content a job carries (`inline_data` not empty) or names (`blob`); failures as for resolve().
  Result<std::shared_ptr<const std::string>> content(const std::string& blob, const std::string& inline_data);

  bool has_blob_store() const { return blobs_ != nullptr; }

 private:
  std::shared_ptr<const TaskPackage> cached(const std::string& key);
  // Parses `package` (errors name `what`) and keeps it under `key`.
  Result<std::shared_ptr<const TaskPackage>> keep(const std::string& key, TaskPackage package, const std::string& what);

  std::shared_ptr<messaging::BlobClient> blobs_;
  std::mutex mu_;
  // By blob name, which is the task id (proto::task_id) of packages jobs carry too; bounded.
  std::map<std::string, std::shared_ptr<const TaskPackage>> parsed_;
};

// Fills a job's package fields: the blob's name when `source` published it, else the files themselves.
inline void attach_task(TaskSource& source, const proto::FileMap& files, proto::FileMap* out_files,
                        std::string* out_blob) {
  std::string name = source.publish(files);
  *out_blob = name;
  if (name.empty())
    *out_files = files;
  else
    out_files->clear();
}

}  // namespace kiln::service
