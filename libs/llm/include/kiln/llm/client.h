// An OpenAI-compatible Chat Completions client (OpenAI, vLLM, llama.cpp server, Ollama...):
// POST {base_url}/chat/completions with model, messages, temperature and max_tokens. Rate limits (429),
// server errors (5xx), timeouts and connection failures are retried with exponential backoff; other
// client errors are not (retrying cannot fix a bad request or a wrong key).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::llm {

struct Message {
  std::string role;  // system | user | assistant
  std::string content;
};

struct ChatRequest {
  std::string model;
  std::vector<Message> messages;
  double temperature = 0.7;
  int64_t max_tokens = 4096;
};

struct ChatReply {
  std::string model;          // as requested (the label of every metric)
  std::string content;        // the first choice's message
  std::string finish_reason;  // "stop", "length", ...
  int64_t prompt_tokens = 0;  // from the reply's `usage`; 0 when the server gives none
  int64_t completion_tokens = 0;
  int64_t attempts = 1;
};

// What happened to one HTTP attempt, for kiln_llm_requests_total{model,outcome}.
namespace outcome {
inline constexpr std::string_view kOk = "ok";
inline constexpr std::string_view kRateLimited = "rate_limited";  // 429
inline constexpr std::string_view kServerError = "server_error";  // 5xx
inline constexpr std::string_view kTimeout = "timeout";           // no answer in time, or no connection
inline constexpr std::string_view kError = "error";               // any other failure
}  // namespace outcome

struct ClientOptions {
  std::string base_url;        // "https://api.openai.com/v1", "http://127.0.0.1:8000/v1"
  std::string api_key;         // "" = no Authorization header
  double timeout_s = 120;      // per attempt
  double total_timeout_s = 0;  // all attempts together (0 = no limit): no retry starts past it
  int64_t max_retries = 3;
  double backoff_initial_s = 1;
  double backoff_max_s = 30;
  // Waits between attempts (tests pass a recorder); defaults to sleeping.
  std::function<void(double seconds)> sleep;
  // Called after every attempt with the model and an outcome:: word.
  std::function<void(const std::string& model, std::string_view outcome)> on_attempt;
};

class ChatClient {
 public:
  explicit ChatClient(ClientOptions options);
  // Thread-safe: each call uses its own connection. Errors: kUnavailable / kDeadlineExceeded after the
  // last retry, kInvalidArgument for a refused request or a reply that is not a completion.
  Result<ChatReply> complete(const ChatRequest& request) const;
  const ClientOptions& options() const { return options_; }

 private:
  ClientOptions options_;
};

// The API key from the environment variable `var` ("" when unset or `var` is empty).
std::string api_key_from_env(const std::string& var);

// A weighted ensemble of models; each request draws one from a seed, so a replayed proposal asks the
// same model.
class Ensemble {
 public:
  // `weights` empty: `fallback` alone. Weights must be positive.
  static Result<Ensemble> make(const std::map<std::string, double>& weights, const std::string& fallback);
  const std::string& pick(uint64_t seed) const;
  const std::vector<std::pair<std::string, double>>& models() const { return models_; }

 private:
  std::vector<std::pair<std::string, double>> models_;  // model, cumulative weight
  double total_ = 0;
};

}  // namespace kiln::llm
