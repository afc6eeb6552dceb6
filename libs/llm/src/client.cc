#include "kiln/llm/client.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

namespace kiln::llm {

namespace {

using json = nlohmann::json;

struct Endpoint {
  std::string origin;  // scheme://host[:port]
  std::string path;    // /v1/chat/completions
};

Result<Endpoint> endpoint_of(const std::string& base_url) {
  size_t scheme = base_url.find("://");
  if (scheme == std::string::npos) return invalid_argument("llm base_url '" + base_url + "': expected scheme://host");
  size_t slash = base_url.find('/', scheme + 3);
  Endpoint e;
  e.origin = base_url.substr(0, slash);
  std::string prefix = slash == std::string::npos ? std::string() : base_url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  e.path = prefix + "/chat/completions";
  return e;
}

std::string request_body(const ChatRequest& r) {
  json messages = json::array();
  for (const Message& m : r.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
  json body = {
      {"model", r.model}, {"messages", messages}, {"temperature", r.temperature}, {"max_tokens", r.max_tokens}};
  return body.dump();
}

// The first 200 bytes of an error body: enough to see the server's reason, bounded for logs.
std::string snippet(const std::string& body) {
  constexpr size_t kMaxBytes = 200;
  std::string s = body.substr(0, kMaxBytes);
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

Result<ChatReply> parse_reply(const std::string& model, const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("reply is not JSON: " + snippet(body));
  ChatReply reply;
  reply.model = model;
  if (auto usage = j.find("usage"); usage != j.end() && usage->is_object()) {
    reply.prompt_tokens = usage->value("prompt_tokens", int64_t{0});
    reply.completion_tokens = usage->value("completion_tokens", int64_t{0});
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object())
    return invalid_argument("reply has no choices: " + snippet(body));
  const json& choice = (*choices)[0];
  if (auto fr = choice.find("finish_reason"); fr != choice.end() && fr->is_string()) reply.finish_reason = *fr;
  auto message = choice.find("message");
  if (message != choice.end() && message->is_object()) {
    if (auto content = message->find("content"); content != message->end() && content->is_string())
      reply.content = *content;
  }
  return reply;
}

}  // namespace

ChatClient::ChatClient(ClientOptions options) : options_(std::move(options)) {
  if (!options_.sleep) options_.sleep = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
}

Result<ChatReply> ChatClient::complete(const ChatRequest& request) const {
  KILN_ASSIGN_OR_RETURN(Endpoint ep, endpoint_of(options_.base_url));
  const std::string body = request_body(request);
  const auto started = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  auto report = [&](std::string_view what) {
    if (options_.on_attempt) options_.on_attempt(request.model, what);
  };

  Status last = unavailable("no attempt made");
  double delay_s = options_.backoff_initial_s;
  const int64_t attempts = 1 + std::max<int64_t>(options_.max_retries, 0);
  for (int64_t attempt = 1; attempt <= attempts; ++attempt) {
    double attempt_timeout_s = options_.timeout_s;
    if (attempt > 1) {
      const double wait_s = std::min(delay_s, options_.backoff_max_s);
      delay_s *= 2;
      if (options_.total_timeout_s > 0) {
        // A retry that could not get a useful slice of the remaining time is not started.
        const double left_s = options_.total_timeout_s - elapsed_s() - wait_s;
        if (left_s < std::min(1.0, options_.timeout_s)) break;
        attempt_timeout_s = std::min(attempt_timeout_s, left_s);
      }
      options_.sleep(wait_s);
    }
    const auto timeout =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(attempt_timeout_s));
    httplib::Client cli(ep.origin);
    cli.set_connection_timeout(timeout);
    cli.set_read_timeout(timeout);
    cli.set_write_timeout(timeout);
    httplib::Headers headers;
    if (!options_.api_key.empty()) headers.emplace("Authorization", "Bearer " + options_.api_key);
    auto res = cli.Post(ep.path, headers, body, "application/json");
    const std::string where = "POST " + options_.base_url + "/chat/completions (" + request.model + ", attempt " +
                              std::to_string(attempt) + "/" + std::to_string(attempts) + ")";
    if (!res) {
      report(outcome::kTimeout);
      const auto err = res.error();
      last = err == httplib::Error::Read || err == httplib::Error::ConnectionTimeout
                 ? deadline_exceeded(where + ": no reply within " + seconds(attempt_timeout_s) + " (" +
                                     httplib::to_string(err) + ")")
                 : unavailable(where + ": " + httplib::to_string(err));
      continue;
    }
    if (res->status == 429) {
      report(outcome::kRateLimited);
      last = unavailable(where + ": rate limited (429)");
      continue;
    }
    if (res->status >= 500) {
      report(outcome::kServerError);
      last = unavailable(where + ": server error " + std::to_string(res->status) + ": " + snippet(res->body));
      continue;
    }
    if (res->status != 200) {
      report(outcome::kError);
      // Not worth another attempt. A key the server refuses, or a model or path it does not know, is the
      // deployment's fault; any other refusal is the request's own (a prompt longer than the model takes).
      const std::string what = where + ": HTTP " + std::to_string(res->status) + ": " + snippet(res->body);
      if (res->status == 401 || res->status == 403) return permission_denied(what);
      if (res->status == 404) return not_found(what);
      return invalid_argument(what);
    }
    auto reply = parse_reply(request.model, res->body);
    if (!reply.is_ok()) {
      report(outcome::kError);
      return reply.status().with_context(where);
    }
    report(outcome::kOk);
    reply->attempts = attempt;
    return reply;
  }
  return last;
}

std::string api_key_from_env(const std::string& var) {
  if (var.empty()) return {};
  const char* v = std::getenv(var.c_str());
  return v ? std::string(v) : std::string();
}

Result<Ensemble> Ensemble::make(const std::map<std::string, double>& weights, const std::string& fallback) {
  Ensemble e;
  if (weights.empty()) {
    if (fallback.empty()) return invalid_argument("llm: no model configured");
    e.models_.emplace_back(fallback, 1.0);
    e.total_ = 1.0;
    return e;
  }
  for (const auto& [model, weight] : weights) {
    if (!(weight > 0) || !std::isfinite(weight))
      return invalid_argument("llm.ensemble." + model + ": expected a weight > 0");
    e.total_ += weight;
    e.models_.emplace_back(model, e.total_);
  }
  return e;
}

const std::string& Ensemble::pick(uint64_t seed) const {
  // splitmix64 of the seed, so neighbouring seeds give unrelated draws.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * 0x1.0p-53 * total_;
  for (const auto& [model, cumulative] : models_)
    if (u < cumulative) return model;
  return models_.back().first;
}

}  // namespace kiln::llm
