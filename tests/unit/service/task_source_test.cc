// Task packages by blob name: a job that carries its package and one that names it get the same parsed
// package; a package that does not parse is the job's fault, a store that does not answer a retry.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "kiln/core/hash.h"
#include "kiln/messaging/outcome.h"
#include "kiln/proto/wire.h"
#include "kiln/service/task_source.h"

using namespace kiln;

namespace {

proto::FileMap bundled(const std::string& name) {
  auto files = task::load_package(std::string(KILN_SOURCE_DIR) + "/configs/tasks/" + name);
  REQUIRE(files.is_ok());
  return *files;
}

struct MapStore {
  std::map<std::string, std::string> blobs;
  bool down = false;
  std::shared_ptr<messaging::BlobClient> client() {
    return std::make_shared<messaging::BlobClient>(
        [this](std::string_view method, const std::string& body) -> Result<std::string> {
          if (down) return unavailable("broker: no answer");
          if (method == proto::blob_method::kPut) {
            auto b = proto::decode<proto::Blob>(body).value();
            blobs[b.sha256] = b.data.data;
            return std::string();
          }
          auto q = proto::decode<proto::BlobQuery>(body).value();
          if (!blobs.count(q.sha256)) return unavailable("no blob");
          if (method == proto::blob_method::kHas) return std::string();
          return proto::encode(proto::Blob{q.sha256, proto::Bytes{blobs[q.sha256]}});
        });
  }
};

}  // namespace

TEST_CASE("a package sent by name arrives as the package sent inline, parsed once", "[service][blobs]") {
  MapStore store;
  service::TaskSource scorer(store.client());
  const proto::FileMap files = bundled("softmax");
  proto::FileMap job_files;
  std::string job_blob;
  service::attach_task(scorer, files, &job_files, &job_blob);
  CHECK(job_files.empty());
  CHECK(job_blob == sha256_hex(proto::encode(proto::TaskFiles{files})));
  // The blob's name is the package's task id: one identity, whoever computes it.
  CHECK(job_blob == proto::task_id(files));

  auto reader_client = store.client();
  service::TaskSource worker(reader_client);
  auto by_name = worker.resolve(job_blob, {});
  REQUIRE(by_name.is_ok());
  CHECK((*by_name)->files == files);
  CHECK((*by_name)->blob == job_blob);
  auto inline_pkg = worker.resolve("", files);
  REQUIRE(inline_pkg.is_ok());
  CHECK((*inline_pkg)->spec.name == (*by_name)->spec.name);
  CHECK((*inline_pkg)->spec.kernel_file == (*by_name)->spec.kernel_file);
  // One package, one parse, whether a job names it or carries it.
  CHECK(inline_pkg->get() == by_name->get());
  // Parsed once: the second job naming it gets the same object without a fetch.
  auto again = worker.resolve(job_blob, {});
  REQUIRE(again.is_ok());
  CHECK(again->get() == by_name->get());
  CHECK(reader_client->fetches() == 1);
}

TEST_CASE("without a blob store packages travel inline and a named one is the job's fault", "[service][blobs]") {
  service::TaskSource inline_only;
  proto::FileMap job_files;
  std::string job_blob = "stale";
  service::attach_task(inline_only, bundled("sgemm"), &job_files, &job_blob);
  CHECK(job_blob.empty());
  CHECK(job_files == bundled("sgemm"));
  auto named = inline_only.resolve(sha256_hex("x"), {});
  REQUIRE_FALSE(named.is_ok());
  CHECK(messaging::outcome_for(named.status()) == messaging::Outcome::kDeadLetter);
  CHECK(messaging::outcome_for(inline_only.resolve("", {}).status()) == messaging::Outcome::kDeadLetter);
}

TEST_CASE("a store that does not answer is retried, and a named package that does not parse is dead-lettered",
          "[service][blobs]") {
  MapStore store;
  service::TaskSource source(store.client());
  store.down = true;
  proto::FileMap job_files;
  std::string job_blob;
  service::attach_task(source, bundled("rmsnorm"), &job_files, &job_blob);
  CHECK(job_blob.empty());  // the put failed: the job carries the files, nothing is lost
  CHECK_FALSE(job_files.empty());
  auto unreachable = source.resolve(sha256_hex("anything"), {});
  CHECK(messaging::outcome_for(unreachable.status()) == messaging::Outcome::kRetry);

  store.down = false;
  const std::string broken = proto::encode(proto::TaskFiles{{{"task.yaml", proto::Bytes{"name: [unclosed"}}}});
  store.blobs[sha256_hex(broken)] = broken;
  auto bad = source.resolve(sha256_hex(broken), {});
  REQUIRE_FALSE(bad.is_ok());
  CHECK(messaging::outcome_for(bad.status()) == messaging::Outcome::kDeadLetter);
  CHECK(bad.status().message().find("task package") != std::string::npos);
}

TEST_CASE("content by name or inline", "[service][blobs]") {
  MapStore store;
  service::TaskSource source(store.client());
  const std::string so(4096, '\x7f');
  const std::string name = source.publish_bytes(so);
  REQUIRE(name == sha256_hex(so));
  CHECK(*source.content(name, "").value() == so);
  CHECK(*source.content("", "inline").value() == "inline");
  CHECK(*service::TaskSource().content("", "inline").value() == "inline");
}
