#include "kiln/llm/client.h"

#include <stdlib.h>

#include <catch2/catch.hpp>

#include "kiln/testing/fake_openai.h"

using namespace kiln;
using kiln::testing::FakeOpenAI;
using kiln::testing::FakeReply;

namespace {

struct Recorder {
  std::vector<double> sleeps;
  std::vector<std::string> outcomes;
};

llm::ClientOptions options_for(const FakeOpenAI& server, Recorder& rec, int64_t retries = 2, double timeout_s = 5) {
  llm::ClientOptions o;
  o.base_url = server.base_url();
  o.api_key = "sk-test";
  o.timeout_s = timeout_s;
  o.max_retries = retries;
  o.backoff_initial_s = 0.5;
  o.backoff_max_s = 0.75;
  o.sleep = [&rec](double s) { rec.sleeps.push_back(s); };
  o.on_attempt = [&rec](const std::string&, std::string_view outcome) { rec.outcomes.emplace_back(outcome); };
  return o;
}

llm::ChatRequest hello() {
  llm::ChatRequest r;
  r.model = "fake-model";
  r.messages = {{"system", "be brief"}, {"user", "hello"}};
  r.temperature = 0.2;
  r.max_tokens = 99;
  return r;
}

}  // namespace

TEST_CASE("a completion sends model, messages, temperature, max_tokens and the key", "[llm]") {
  FakeOpenAI server;
  server.script({FakeReply{200, "hi", "stop", 12, 3}});
  Recorder rec;
  llm::ChatClient client(options_for(server, rec));
  auto reply = client.complete(hello());
  REQUIRE(reply.is_ok());
  CHECK(reply->content == "hi");
  CHECK(reply->finish_reason == "stop");
  CHECK(reply->prompt_tokens == 12);
  CHECK(reply->completion_tokens == 3);
  CHECK(reply->attempts == 1);
  auto body = server.requests().at(0);
  CHECK(body["model"] == "fake-model");
  CHECK(body["max_tokens"] == 99);
  CHECK(body["temperature"] == Approx(0.2));
  CHECK(body["messages"][1]["content"] == "hello");
  CHECK(server.authorization().at(0) == "Bearer sk-test");
  CHECK(rec.outcomes == std::vector<std::string>{"ok"});
}

TEST_CASE("429 and 5xx are retried with exponential backoff", "[llm]") {
  FakeOpenAI server;
  server.script({FakeReply{429}, FakeReply{503}, FakeReply{200, "done"}});
  Recorder rec;
  llm::ChatClient client(options_for(server, rec));
  auto reply = client.complete(hello());
  REQUIRE(reply.is_ok());
  CHECK(reply->content == "done");
  CHECK(reply->attempts == 3);
  CHECK(rec.sleeps == std::vector<double>{0.5, 0.75});  // doubled, then capped
  CHECK(rec.outcomes == std::vector<std::string>{"rate_limited", "server_error", "ok"});

  SECTION("and give up after max_retries") {
    server.script({FakeReply{500}, FakeReply{500}, FakeReply{500}});
    auto failed = client.complete(hello());
    REQUIRE_FALSE(failed.is_ok());
    CHECK(failed.status().code() == StatusCode::kUnavailable);
    CHECK(failed.status().message().find("server error 500") != std::string::npos);
  }
}

TEST_CASE("a reply slower than the timeout is retried, then reported as a timeout", "[llm]") {
  FakeOpenAI server;
  FakeReply slow{200, "late"};
  slow.delay_s = 1.0;
  server.script({slow, slow});
  Recorder rec;
  llm::ChatClient client(options_for(server, rec, 1, 0.25));
  auto reply = client.complete(hello());
  REQUIRE_FALSE(reply.is_ok());
  CHECK(reply.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(rec.outcomes == std::vector<std::string>{"timeout", "timeout"});
}

TEST_CASE("no retry starts past the total timeout", "[llm]") {
  FakeOpenAI server;
  FakeReply slow{200, "late"};
  slow.delay_s = 1.0;
  server.script({slow, slow, slow});
  Recorder rec;
  llm::ClientOptions o = options_for(server, rec, 5, 0.25);
  o.total_timeout_s = 0.6;  // 0.25 s gone, then a 0.5 s backoff: no time for another useful attempt
  llm::ChatClient client(o);
  auto reply = client.complete(hello());
  REQUIRE_FALSE(reply.is_ok());
  CHECK(reply.status().message().find("no reply within 0.25 s") != std::string::npos);
  CHECK(rec.outcomes.size() == 1);
}

TEST_CASE("client errors and malformed replies are not retried", "[llm]") {
  FakeOpenAI server;
  server.script({FakeReply{401}, FakeReply{404}, FakeReply{400}, FakeReply{200, "", "stop", 0, 0, 0, "{not json"}});
  Recorder rec;
  llm::ChatClient client(options_for(server, rec));
  // The code says whose fault it is: the deployment's key or model, or the request's own.
  auto refused = client.complete(hello());
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == StatusCode::kPermissionDenied);
  CHECK(refused.status().message().find("HTTP 401") != std::string::npos);
  auto unknown = client.complete(hello());
  REQUIRE_FALSE(unknown.is_ok());
  CHECK(unknown.status().code() == StatusCode::kNotFound);
  auto bad = client.complete(hello());
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("HTTP 400") != std::string::npos);
  auto garbled = client.complete(hello());
  REQUIRE_FALSE(garbled.is_ok());
  CHECK(garbled.status().message().find("not JSON") != std::string::npos);
  CHECK(server.requests().size() == 4);
}

TEST_CASE("the API key comes from the environment variable the config names", "[llm]") {
  ::setenv("KILN_TEST_LLM_KEY", "sk-from-env", 1);
  CHECK(llm::api_key_from_env("KILN_TEST_LLM_KEY") == "sk-from-env");
  ::unsetenv("KILN_TEST_LLM_KEY");
  CHECK(llm::api_key_from_env("KILN_TEST_LLM_KEY").empty());
  CHECK(llm::api_key_from_env("").empty());
}

TEST_CASE("a weighted ensemble picks models by seed, in proportion to their weights", "[llm]") {
  auto e = llm::Ensemble::make({{"big", 1}, {"small", 3}}, "unused");
  REQUIRE(e.is_ok());
  int small = 0;
  for (uint64_t seed = 0; seed < 4000; ++seed) small += e->pick(seed) == "small";
  CHECK(small > 2800);
  CHECK(small < 3200);
  CHECK(e->pick(42) == e->pick(42));
  auto single = llm::Ensemble::make({}, "only");
  REQUIRE(single.is_ok());
  CHECK(single->pick(7) == "only");
  CHECK_FALSE(llm::Ensemble::make({{"bad", 0}}, "x").is_ok());
}
