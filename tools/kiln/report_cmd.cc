// `kiln report`: a campaign as one self-contained HTML page (kiln/report/report.h).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "campaign_views.h"
#include "commands.h"
#include "kiln/core/files.h"
#include "kiln/messaging/client.h"
#include "kiln/report/report.h"

namespace kiln::cli {

std::string default_report_path(const std::string& campaign) { return "kiln-report-" + campaign + ".html"; }

Status check_output_folder(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    return not_found(path + ": no folder " + parent.string() + " (kiln creates none)");
  return Status::ok();
}

Result<std::string> write_report(const Common& c, const std::string& campaign, const std::string& path) {
  const std::string out = path.empty() ? default_report_path(campaign) : path;
  KILN_RETURN_IF_ERROR(check_output_folder(out));
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  KILN_ASSIGN_OR_RETURN(std::optional<proto::CampaignInfo> known, find_campaign(client, campaign));
  if (!known) return not_found(unknown_campaign(campaign));
  KILN_ASSIGN_OR_RETURN(
      std::string body,
      client.request(std::string(proto::svc::kScore), "best",
                     proto::encode(proto::CampaignQuery{campaign, report::kMaxReportPrograms}), 30.0));
  auto best = proto::decode<proto::BestPrograms>(body);
  if (!best.is_ok()) return internal_error("bad reply: " + best.status().message());
  const std::string html = report::render_html(
      report::make_input(std::move(best).value(), c.config.promoter.registry_dir, c.config.promoter.min_speedup));
  KILN_RETURN_IF_ERROR(write_file_atomic(out, html));
  return std::filesystem::absolute(out).string();
}

std::string report_hint(const Common& c, const std::string& campaign) {
  std::string hint = "report: kiln report " + campaign;
  if (c.config.scorer.metrics_port > 0)
    hint += ", or http://<scorer host>:" + std::to_string(c.config.scorer.metrics_port) + "/campaigns/" + campaign +
            "/report";
  return hint;
}

int cmd_report(const Common& c, const std::string& campaign, const std::string& path) {
  auto written = write_report(c, campaign, path);
  if (!written.is_ok()) return fail(written.status().message());
  if (c.json)
    std::printf("%s\n", nlohmann::json{{"campaign_id", campaign}, {"path", *written}}.dump().c_str());
  else
    std::printf("%s\n", written->c_str());
  return 0;
}

}  // namespace kiln::cli
