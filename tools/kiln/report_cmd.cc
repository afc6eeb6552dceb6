// `kiln report`: a campaign as one self-contained HTML page (kiln/report/report.h).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kiln/core/files.h"
#include "kiln/messaging/client.h"
#include "kiln/report/report.h"

namespace kiln::cli {

std::string default_report_path(const std::string& campaign) { return "kiln-report-" + campaign + ".html"; }

Result<std::string> write_report(const Common& c, const std::string& campaign, const std::string& path) {
  zmq::context_t ctx(1);
  messaging::Client client(ctx, c.broker_endpoint());
  KILN_ASSIGN_OR_RETURN(
      std::string body,
      client.request(std::string(proto::svc::kScore), "best",
                     proto::encode(proto::CampaignQuery{campaign, report::kMaxReportPrograms}), 30.0));
  auto best = proto::decode<proto::BestPrograms>(body);
  if (!best.is_ok()) return internal_error("bad reply: " + best.status().message());
  const std::string html = report::render_html(
      report::make_input(std::move(best).value(), c.config.promoter.registry_dir, c.config.promoter.min_speedup));
  const std::string out = path.empty() ? default_report_path(campaign) : path;
  if (const auto parent = std::filesystem::path(out).parent_path(); !parent.empty())
    KILN_RETURN_IF_ERROR(make_dirs(parent.string()));
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
