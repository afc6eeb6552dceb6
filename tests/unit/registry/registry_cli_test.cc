// `kiln registry match` and `kiln registry verify` as a user runs them: the built binary on a registry in
// a temp dir, and the usage guide's example (docs/usage.md) run word for word.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiln/core/files.h"

namespace fs = std::filesystem;

namespace {

const std::string kKiln = KILN_BINARY_DIR "/bin/kiln";
const std::string kExample = std::string(KILN_SOURCE_DIR) + "/tests/data/registry/example";

struct Run {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv in `cwd` with stdout and stderr captured through files (no pipe to drain, no deadlock).
Run run(const std::vector<std::string>& argv, const std::string& cwd = ".") {
  kiln::TempDir capture("kiln-cli-capture");
  const std::string out_path = capture.path() + "/out", err_path = capture.path() + "/err";
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0 || ::chdir(cwd.c_str()) != 0) ::_exit(126);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  Run r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto out = kiln::read_file(out_path);
  auto err = kiln::read_file(err_path);
  r.out = out.is_ok() ? *out : "";
  r.err = err.is_ok() ? *err : "";
  return r;
}

Run kiln_cmd(std::vector<std::string> args, const std::string& cwd = ".") {
  args.insert(args.begin(), kKiln);
  return run(args, cwd);
}

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

// Splits a README command line into words: spaces separate, double quotes group.
std::vector<std::string> shell_words(const std::string& line) {
  std::vector<std::string> words;
  std::string cur;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
      any = true;
    } else if (c == ' ' && !quoted) {
      if (any) words.push_back(cur);
      cur.clear();
      any = false;
    } else {
      cur.push_back(c);
      any = true;
    }
  }
  if (any) words.push_back(cur);
  return words;
}

}  // namespace

TEST_CASE("kiln registry match picks a kernel and explains why", "[registry][cli]") {
  kiln::TempDir dir("kiln-registry-cli");
  const std::string reg = dir.path() + "/registry";
  fs::copy(kExample, reg, fs::copy_options::recursive);

  Run r = kiln_cmd({"registry", "--dir", reg, "match", "rmsnorm", "--dtype", "fp16", "--shape", "B=16,H=5000", "--gpu",
                    "NVIDIA H100 80GB HBM3"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(r.out ==
        "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1\n"
        "  source   kernels/cuda/rmsnorm/cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1.cu\n"
        "  speedup  1.65x on NVIDIA H200 (op_level)\n"
        "  why      same architecture (hopper) as NVIDIA H100 80GB HBM3: measured on NVIDIA H200, nearest shape "
        "B=16,H=4096 for B=16,H=5000\n");

  // --json and --dir after the subcommand; the entry as stored plus the match block.
  r = kiln_cmd({"registry", "match", "layernorm", "--dtype", "fp16", "--shape", "batch=8,hidden_size=2048", "--gpu",
                "A10G", "--json", "--dir", reg});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["entry"]["kernel_id"] == "triton_layernorm_a10g_fp16_b8_h2048_v1");
  CHECK(j["entry"]["skill_ids"].size() == 2);
  CHECK_FALSE(j["entry"].contains("source_sha256"));
  CHECK(j["match"]["gpu_tier"] == "exact");
  CHECK(j["match"]["shape_distance"] == 0.0);
  CHECK(j["match"]["reason"] == "exact GPU (a10g), exact shape");
  CHECK(j["match"]["source_verified"] == false);
}

TEST_CASE("kiln registry match exits non-zero with one line when nothing fits", "[registry][cli]") {
  kiln::TempDir dir("kiln-registry-cli");
  const std::string reg = dir.path() + "/registry";
  fs::copy(kExample, reg, fs::copy_options::recursive);
  struct Case {
    std::vector<std::string> args;
    std::string err;
  } cases[] = {
      {{"softmax", "--dtype", "fp16", "--shape", "N=1024"},
       "kiln: no kernel for op softmax (the registry has: layernorm, rmsnorm)\n"},
      {{"rmsnorm", "--dtype", "bf16", "--shape", "B=16,H=4096"},
       "kiln: no rmsnorm kernel in dtype bf16 (it has: fp16, fp32)\n"},
      {{"rmsnorm", "--dtype", "fp16", "--shape", "B=16,H=4096", "--gpu", "Tesla T4"},
       "kiln: no rmsnorm fp16 kernel for GPU Tesla T4 (turing): there are rmsnorm fp16 kernels for NVIDIA H200 "
       "(hopper)\n"},
      {{"rmsnorm", "--dtype", "fp16", "--shape", "N=4096"},
       "kiln: no rmsnorm fp16 kernel with the dims of N=4096 (closest: cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1, "
       "shape B=16,H=4096)\n"},
      {{"rmsnorm", "--dtype", "fp16", "--shape", "B=16,H=abc"},
       "kiln: --shape: \"H=abc\": expected a positive integer after 'H=', got \"abc\"\n"},
      {{"rmsnorm", "--dtype", "fp16", "--shape", "B=16", "--gpu", ""},
       "kiln: --gpu: expected a GPU name, got an empty string\n"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args{"registry", "--dir", reg, "match"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Run r = kiln_cmd(args);
    INFO(c.args[0] << " " << c.args.back() << ": " << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK(r.err == c.err);
  }
  // An empty or absent registry says so.
  Run r =
      kiln_cmd({"registry", "--dir", dir.path() + "/none", "match", "rmsnorm", "--dtype", "fp16", "--shape", "B=1"});
  CHECK(r.exit_code == 1);
  CHECK(r.err == "kiln: no rmsnorm fp16 kernel: " + dir.path() + "/none/verified_kernels.json has no kernels yet\n");
  // --json still prints a document on failure.
  r = kiln_cmd({"--json", "registry", "--dir", reg, "match", "softmax", "--dtype", "fp16", "--shape", "N=1"});
  CHECK(r.exit_code == 1);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["match"].is_null());
  CHECK(j["error"] == "no kernel for op softmax (the registry has: layernorm, rmsnorm)");
  CHECK(lines(r.err) == 1);
}

TEST_CASE("kiln registry verify warns about an entry without source_sha256 and passes", "[registry][cli]") {
  kiln::TempDir dir("kiln-registry-cli");
  const std::string reg = dir.path() + "/registry";
  fs::copy(kExample, reg, fs::copy_options::recursive);
  Run r = kiln_cmd({"registry", "--dir", reg, "verify"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err ==
        "kiln: warning: triton_layernorm_a10g_fp16_b8_h2048_v1: no source_sha256: "
        "kernels/triton/layernorm/triton_layernorm_a10g_fp16_b8_h2048_v1.py cannot be checked against the kernel "
        "that was measured (ranked below hashed entries)\n");
  CHECK(r.out == reg + ": ok with 1 warning(s) (3 kernel(s), every source present; 1 without source_sha256)\n");
  r = kiln_cmd({"--json", "registry", "--dir", reg, "verify"});
  CHECK(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["ok"] == true);
  CHECK(j["warnings"].size() == 1);
}

TEST_CASE("the usage guide's `kiln registry match` example prints what the guide shows", "[registry][cli]") {
  auto readme = kiln::read_file(std::string(KILN_SOURCE_DIR) + "/docs/usage.md");
  REQUIRE(readme.is_ok());
  // Blocks of the form ```console / $ build/bin/kiln registry ... / output / ```.
  const std::string open = "```console\n$ build/bin/kiln registry ";
  size_t examples = 0;
  for (size_t at = readme->find(open); at != std::string::npos; at = readme->find(open, at + 1)) {
    size_t cmd_start = at + std::string("```console\n$ ").size();
    size_t cmd_end = readme->find('\n', cmd_start);
    size_t block_end = readme->find("```", cmd_end);
    REQUIRE(block_end != std::string::npos);
    std::vector<std::string> words = shell_words(readme->substr(cmd_start, cmd_end - cmd_start));
    std::string expected = readme->substr(cmd_end + 1, block_end - cmd_end - 1);
    words[0] = kKiln;  // the binary just built, wherever the build folder is
    Run r = run(words, KILN_SOURCE_DIR);
    INFO(readme->substr(cmd_start, cmd_end - cmd_start));
    CHECK(r.out + r.err == expected);
    ++examples;
  }
  CHECK(examples >= 1);
}
