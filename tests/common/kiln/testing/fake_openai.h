// A fake OpenAI-compatible Chat Completions server for tests: httplib on 127.0.0.1, an ephemeral port,
// scripted replies. Kernel requests take the next scripted reply (then `fallback`); strategy-rewrite
// requests (their system message asks to improve "the strategy section") get `strategy_reply`. hold_after(n)
// makes every kernel request after the first n wait until release(): what the test does in between happens
// while the run cannot get further.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kiln::testing {

struct FakeReply {
  int status = 200;
  std::string content;
  std::string finish_reason = "stop";
  int64_t prompt_tokens = 100;
  int64_t completion_tokens = 50;
  double delay_s = 0;    // sleep before answering (a reply slower than the client's timeout)
  std::string raw_body;  // sent as is when set (malformed replies)
};

inline FakeReply kernel_reply(const std::string& region, const std::string& lang = "cpp") {
  FakeReply r;
  r.content = "Here is a faster version.\n```" + lang + "\n// [EVOLVE_START]\n" + region + "// [EVOLVE_END]\n```\n";
  return r;
}

class FakeOpenAI {
 public:
  FakeOpenAI() {
    server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      FakeReply reply;
      {
        std::unique_lock lock(mu_);
        auto body = nlohmann::json::parse(req.body, nullptr, false);
        requests_.push_back(body);
        authorization_.push_back(req.get_header_value("Authorization"));
        bool rewrite = false;
        if (body.is_object() && body.contains("messages") && body["messages"].is_array() && !body["messages"].empty()) {
          const auto& first = body["messages"][0];
          rewrite = first.value("content", std::string()).find("strategy section") != std::string::npos;
        }
        if (!rewrite) {
          released_.wait(lock, [this] { return hold_after_ < 0 || kernel_requests_ < hold_after_; });
          ++kernel_requests_;
        }
        if (rewrite) {
          reply = strategy_reply;
          ++rewrites_;
        } else if (!script_.empty()) {
          reply = script_.front();
          script_.pop_front();
        } else {
          reply = fallback;
        }
      }
      if (reply.delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(reply.delay_s));
      res.status = reply.status;
      if (!reply.raw_body.empty()) {
        res.set_content(reply.raw_body, "application/json");
        return;
      }
      if (reply.status != 200) {
        res.set_content(R"({"error":{"message":"scripted failure"}})", "application/json");
        return;
      }
      nlohmann::json out = {{"id", "chatcmpl-fake"},
                            {"object", "chat.completion"},
                            {"choices",
                             {{{"index", 0},
                               {"message", {{"role", "assistant"}, {"content", reply.content}}},
                               {"finish_reason", reply.finish_reason}}}},
                            {"usage",
                             {{"prompt_tokens", reply.prompt_tokens},
                              {"completion_tokens", reply.completion_tokens},
                              {"total_tokens", reply.prompt_tokens + reply.completion_tokens}}}};
      res.set_content(out.dump(), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("fake OpenAI server: cannot bind");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~FakeOpenAI() {
    release();
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  FakeOpenAI(const FakeOpenAI&) = delete;
  FakeOpenAI& operator=(const FakeOpenAI&) = delete;

  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }

  void script(std::vector<FakeReply> replies) {
    std::lock_guard lock(mu_);
    for (auto& r : replies) script_.push_back(std::move(r));
  }
  size_t scripted_left() {
    std::lock_guard lock(mu_);
    return script_.size();
  }
  std::vector<nlohmann::json> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::vector<std::string> authorization() {
    std::lock_guard lock(mu_);
    return authorization_;
  }
  int rewrites() {
    std::lock_guard lock(mu_);
    return rewrites_;
  }
  // Kernel requests after the first `n` (counted from the start) wait until release().
  void hold_after(int n) {
    std::lock_guard lock(mu_);
    hold_after_ = n;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      hold_after_ = -1;
    }
    released_.notify_all();
  }
  // Kernel requests answered or waiting.
  int kernel_requests() {
    std::lock_guard lock(mu_);
    return kernel_requests_;
  }

  // Set before requests arrive.
  FakeReply fallback = FakeReply{200, "I cannot help with that.", "stop", 10, 5};
  FakeReply strategy_reply =
      FakeReply{200, "```markdown\n## Strategy\n- Parallelize the outer loop first.\n```\n", "stop", 40, 20};

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::deque<FakeReply> script_;
  std::vector<nlohmann::json> requests_;
  std::vector<std::string> authorization_;
  int rewrites_ = 0;
  int hold_after_ = -1;  // no hold
  int kernel_requests_ = 0;
  std::condition_variable released_;
};

}  // namespace kiln::testing
