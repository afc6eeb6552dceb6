// The schemas are header-only (fields() lists); this unit checks that every public header compiles
// alone and instantiates each codec once so template errors surface here, not in a service.
#include "kiln/core/compress.h"
#include "kiln/core/hash.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/process.h"
#include "kiln/proto/wire.h"

namespace kiln::proto {

namespace {
constexpr std::string_view kDeflate = "deflate";
// How older writers marked a confirmation's program id (detail::upgrade_confirmation).
constexpr std::string_view kLegacyConfirmSuffix = "#confirm";
}  // namespace

std::string task_blob_bytes(const FileMap& files) { return encode(TaskFiles{files}); }

std::string task_id(const FileMap& files) { return sha256_hex(task_blob_bytes(files)); }

void detail::upgrade_confirmation(Candidate& cand, Purpose& purpose) {
  if (!cand.program_id.ends_with(kLegacyConfirmSuffix)) return;
  cand.program_id.resize(cand.program_id.size() - kLegacyConfirmSuffix.size());
  purpose = Purpose::kConfirm;
}

void set_kernel_library(TestRequest& request, std::string so) {
  std::string deflated = deflate_bytes(so);
  if (!deflated.empty() && deflated.size() < so.size()) {
    request.kernel_so_encoding = std::string(kDeflate);
    request.kernel_so_size = static_cast<int64_t>(so.size());
    request.kernel_so = Bytes{std::move(deflated)};
  } else {
    request.kernel_so_encoding.clear();
    request.kernel_so_size = 0;
    request.kernel_so = Bytes{std::move(so)};
  }
}

Result<std::string> kernel_library(const TestRequest& request, size_t max_bytes) {
  if (request.kernel_so_encoding.empty()) return request.kernel_so.data;
  if (request.kernel_so_encoding != kDeflate)
    return invalid_argument("kernel_so_encoding '" + request.kernel_so_encoding + "' is not one Kiln writes");
  if (request.kernel_so_size < 0) return invalid_argument("kernel_so_size is negative");
  return inflate_bytes(request.kernel_so.data, static_cast<size_t>(request.kernel_so_size), max_bytes);
}

namespace {
[[maybe_unused]] void instantiate_all() {
  (void)decode<Ready>("");
  (void)decode<Job>("");
  (void)decode<ResultMsg>("");
  (void)decode<Submit>("");
  (void)decode<Ack>("");
  (void)decode<Request>("");
  (void)decode<Reply>("");
  (void)decode<Disconnect>("");
  (void)decode<IngestRequest>("");
  (void)decode<CampaignStart>("");
  (void)decode<ProposalRequest>("");
  (void)decode<CompileRequest>("");
  (void)decode<TestRequest>("");
  (void)decode<ScoreResult>("");
  (void)decode<DeadLetter>("");
  (void)decode<PromoteRequest>("");
  (void)decode<PromoteOutcome>("");
  (void)decode<BrokerStatus>("");
  (void)decode<CampaignList>("");
  (void)decode<BestPrograms>("");
  (void)encode(Ready{});
  (void)encode(ResultMsg{});
  (void)encode(PromoteRequest{});
  (void)encode(BestPrograms{});
}
}  // namespace
}  // namespace kiln::proto
