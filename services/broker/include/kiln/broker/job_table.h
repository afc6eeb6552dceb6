// The broker's durable job table (SQLite, WAL). Every state change of a job is one transaction, and a
// completed job's follow-ups are inserted in the same transaction, so nothing is lost or doubled when
// any process dies.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/proto/wire.h"
#include "kiln/store/sqlite.h"

namespace kiln::broker {

enum class JobState { kQueued, kLeased, kDone, kFailed, kDead };
std::string_view job_state_name(JobState s);

struct JobRow {
  std::string id;
  std::string service;
  JobState state = JobState::kQueued;
  int attempt = 1;
  std::string payload;
  double timeout_s = 0;
  double created_at = 0;  // wall clock
  std::string error;
  std::string avoid_worker;  // FollowUp::avoid_worker
  std::string device;        // FollowUp::device
  // Scheduling (job_queue.h): higher priorities are handed out first; within one, campaigns take turns.
  // Follow-ups inherit both from the job whose result made them.
  int64_t priority = 0;
  std::string campaign;  // empty: the jobs of no campaign, one group of their own
};

// How much the table keeps of the jobs that ended (done, failed, dead). Their rows are what makes a late
// duplicate of an old job id a no-op (idempotent submit), so they are kept far longer than any retry or
// redelivery can take; past that, what is left of them (a result, an error) is history the scorer's
// archive keeps anyway.
struct RetentionOptions {
  double finished_max_age_s = 7 * 24 * 3600.0;  // 0: no age limit
  int64_t finished_max_jobs = 100000;           // the newest ones kept; 0: no count limit
  int64_t prune_batch = 5000;                   // rows deleted per pass, so one pass never stalls the broker
};

// The file's pages (PRAGMA page_count, freelist_count): its size without the WAL.
struct TableStorage {
  int64_t page_bytes = 0;
  int64_t pages = 0;
  int64_t free_pages = 0;
  int64_t bytes() const { return page_bytes * pages; }
};

class JobTable {
 public:
  // `max_bytes` > 0 bounds the file (SQLite's max_page_count): a write past it fails like a full disk.
  static Result<JobTable> open(const std::string& path, int64_t max_bytes = 0);

  // Called before every write with the operation's name; a non-ok status fails the write (tests inject a
  // full disk this way). Empty: no check.
  using WriteFault = std::function<Status(std::string_view op)>;
  void set_write_fault(WriteFault fault) { write_fault_ = std::move(fault); }

  // Jobs that are queued or leased (a restarted broker leases them again).
  Result<std::vector<JobRow>> load_active();
  // Inserts a new queued job; false when the id already exists (idempotent submit).
  Result<bool> insert(const JobRow& row);
  Status mark_leased(const std::string& id, int attempt);
  Status requeue(const std::string& id, int attempt, const std::string& reason);
  // Completes a job and enqueues its follow-ups in one transaction. Returns the follow-ups that were new
  // (a follow-up whose id exists already is a duplicate and is dropped).
  Result<std::vector<JobRow>> complete(const std::string& id, JobState final_state, const std::string& result,
                                       const std::string& error, const std::vector<proto::FollowUp>& next);
  Result<JobRow> get(const std::string& id, std::string* result = nullptr);
  // Deletes up to `batch` ended jobs (done, failed, dead) that ended before `ended_before` (wall clock; 0:
  // no age limit) or are older than the newest `keep_newest` ended ones (0: no count limit), oldest first,
  // then gives their pages back to the file system. Returns how many rows it deleted. Queued and leased
  // jobs are never touched.
  Result<int64_t> prune_finished(double ended_before, int64_t keep_newest, int64_t batch);
  // Gives the file's free pages back (incremental vacuum); a table opened before auto_vacuum existed was
  // converted once by open().
  Status release_free_pages();
  Result<TableStorage> storage();
  // Counts by service and state, for status queries.
  Result<std::map<std::string, std::map<std::string, int64_t>>> counts();

  // The blob store beside the jobs (DESIGN §1): content named by its sha256 (lowercase hex), written
  // once. put_blob does not check the name (the caller does); a second put of a name is a no-op.
  Status put_blob(const std::string& sha256, const std::string& data);
  // not_found when there is no such blob.
  Result<std::string> get_blob(const std::string& sha256);
  Result<bool> has_blob(const std::string& sha256);

 private:
  explicit JobTable(store::Database db) : db_(std::move(db)) {}
  Status check_write(std::string_view op) const { return write_fault_ ? write_fault_(op) : Status::ok(); }
  store::Database db_;
  WriteFault write_fault_;
};

}  // namespace kiln::broker
