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
        "  source   kernels/cuda/rmsnorm/cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1.cu (matches its source_sha256)\n"
        "  speedup  1.65x at B=16,H=4096 on NVIDIA H200 (op_level)\n"
        "  why      same architecture (hopper, gh100 class) as NVIDIA H100 80GB HBM3: measured on NVIDIA H200, "
        "nearest shape B=16,H=4096 for B=16,H=5000\n");

  // --json and --dir after the subcommand; the entry as stored plus the match block.
  r = kiln_cmd({"registry", "match", "layernorm", "--dtype", "fp16", "--shape", "batch=8,hidden_size=2048", "--gpu",
                "A10G", "--json", "--dir", reg, "--allow-unhashed"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["entry"]["kernel_id"] == "triton_layernorm_a10g_fp16_b8_h2048_v1");
  CHECK(j["entry"]["skill_ids"].size() == 2);
  CHECK_FALSE(j["entry"].contains("source_sha256"));
  CHECK(j["match"]["gpu_tier"] == "exact");
  CHECK(j["match"]["shape_distance"] == 0.0);
  CHECK(j["match"]["reason"] == "exact GPU (a10g), exact shape, unhashed source (allowed)");
  CHECK(j["match"]["source_verified"] == false);
  CHECK(j["warnings"].size() == 1);
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
       "kiln: no rmsnorm fp16 kernel for GPU Tesla T4 (turing, tu104 class): there are rmsnorm fp16 kernels for "
       "NVIDIA H200 (hopper, gh100 class)\n"},
      {{"rmsnorm", "--dtype", "fp16", "--shape", "N=4096"},
       "kiln: no rmsnorm fp16 kernel that fits N=4096 (closest: cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1, "
       "shape B=16,H=4096: it names batch, which the query does not)\n"},
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
  // An empty registry says so; an absent folder is named as such.
  Run r =
      kiln_cmd({"registry", "--dir", dir.path() + "/none", "match", "rmsnorm", "--dtype", "fp16", "--shape", "B=1"});
  CHECK(r.exit_code == 1);
  CHECK(r.err == "kiln: no registry at " + dir.path() + "/none: no such folder\n");
  fs::create_directories(dir.path() + "/none");
  r = kiln_cmd({"registry", "--dir", dir.path() + "/none", "match", "rmsnorm", "--dtype", "fp16", "--shape", "B=1"});
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

TEST_CASE("a registry folder that does not exist is an error, not an empty registry", "[registry][cli]") {
  kiln::TempDir dir("kiln-registry-cli");
  const std::string missing = dir.path() + "/no-such-registry";
  for (const char* command : {"verify", "list"}) {
    Run r = kiln_cmd({"registry", "--dir", missing, command});
    INFO(command << ": " << r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK(r.err == "kiln: no registry at " + missing + ": no such folder\n");
  }
  // An existing folder without entries is an empty registry.
  fs::create_directories(missing);
  CHECK(kiln_cmd({"registry", "--dir", missing, "verify"}).exit_code == 0);
  CHECK(kiln_cmd({"registry", "--dir", missing, "list"}).exit_code == 0);
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

namespace {

// A copy of the example registry with `extra` entries appended (copies of its rmsnorm H200 entry, changed
// by `edit`, each with its own source file).
struct Planted {
  kiln::TempDir dir{"kiln-registry-cli"};
  std::string reg = dir.path() + "/registry";
  nlohmann::json doc;
  Planted() {
    fs::copy(kExample, reg, fs::copy_options::recursive);
    doc = nlohmann::json::parse(*kiln::read_file(reg + "/verified_kernels.json"));
  }
  const nlohmann::json& base() const { return doc["kernels"][1]; }
  // Appends a copy of the H200 entry as version `v`, its source copied too; returns the new entry.
  nlohmann::json& add(int v, double speedup) {
    nlohmann::json e = base();
    const std::string from = reg + "/" + e["source_path"].get<std::string>();
    e["kernel_id"] = "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v" + std::to_string(v);
    e["source_path"] = "kernels/cuda/rmsnorm/" + e["kernel_id"].get<std::string>() + ".cu";
    e["benchmark"]["speedup"] = speedup;
    fs::copy_file(from, reg + "/" + e["source_path"].get<std::string>());
    doc["kernels"].push_back(e);
    return doc["kernels"].back();
  }
  void save() const { REQUIRE(kiln::write_file_atomic(reg + "/verified_kernels.json", doc.dump(2)).is_ok()); }
  Run match(std::vector<std::string> args) const {
    args.insert(args.begin(), {"registry", "--dir", reg, "match", "rmsnorm", "--dtype"});
    return kiln_cmd(args);
  }
};

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

TEST_CASE("kiln registry match recommends only what kiln registry verify accepts", "[registry][cli][planner]") {
  Planted p;
  p.add(2, 9.0)["verification"]["passed"] = false;
  p.add(3, 8.0)["benchmark"]["passed"] = false;
  nlohmann::json& edited = p.add(4, 7.0);
  REQUIRE(kiln::write_file_atomic(p.reg + "/" + edited["source_path"].get<std::string>(), "// edited\n").is_ok());
  nlohmann::json& deleted = p.add(5, 6.0);
  fs::remove(p.reg + "/" + deleted["source_path"].get<std::string>());
  p.save();
  CHECK(kiln_cmd({"registry", "--dir", p.reg, "verify"}).exit_code == 1);  // verify rejects v2-v5

  Run r = p.match({"fp16", "--shape", "B=16,H=4096", "--gpu", "NVIDIA H200", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["entry"]["kernel_id"] == "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1");  // 1.65x, the only sound one
  CHECK(j["match"]["source_verified"] == true);

  // With v1's source edited too, nothing is recommended, and the line says why.
  REQUIRE(kiln::write_file_atomic(p.reg + "/" + p.base()["source_path"].get<std::string>(), "// edited\n").is_ok());
  r = p.match({"fp16", "--shape", "B=16,H=4096", "--gpu", "NVIDIA H200"});
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  CHECK(
      r.err.starts_with("kiln: no rmsnorm fp16 kernel that `kiln registry verify` accepts: "
                        "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1 (source "
                        "kernels/cuda/rmsnorm/cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1.cu does not match "
                        "source_sha256)"));
}

TEST_CASE("kiln registry match bounds the shape, reads every case, and keeps an H20 off H200 kernels",
          "[registry][cli][planner]") {
  Planted p;
  Run r = p.match({"fp16", "--shape", "B=1,H=1048576"});
  CHECK(r.exit_code == 1);
  CHECK(r.err ==
        "kiln: no rmsnorm fp16 kernel that fits B=1,H=1048576 (closest: cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1, "
        "shape B=16,H=4096: batch=16 is more than 2x from 1)\n");
  CHECK(p.match({"fp16", "--shape", "B=1,H=1048576", "--max-shape-ratio", "300"}).exit_code == 0);
  CHECK(p.match({"fp16", "--shape", "B=16,H=4096", "--max-shape-ratio", "0.5"}).exit_code != 0);

  // An entry measured at two shapes is found by its second case, with that case's speedup.
  nlohmann::json& two = p.add(2, 1.7);
  two["cases"] = nlohmann::json::array({{{"dims", {{"B", 16}, {"H", 4096}}}, {"speedup", 1.7}},
                                        {{"dims", {{"B", 16}, {"H", 65536}}}, {"speedup", 3.5}}});
  p.save();
  r = p.match({"fp16", "--shape", "B=16,H=65536", "--gpu", "NVIDIA H200"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(first_line(r.out) == "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v2");
  CHECK(r.out.find("  speedup  3.50x at B=16,H=65536 on NVIDIA H200 (op_level)\n") != std::string::npos);

  r = p.match({"fp16", "--shape", "B=16,H=4096", "--gpu", "NVIDIA H20"});
  CHECK(r.exit_code == 1);
  CHECK(r.err ==
        "kiln: no rmsnorm fp16 kernel for GPU NVIDIA H20 (hopper, h20 class): there are rmsnorm fp16 "
        "kernels for NVIDIA H200 (hopper, gh100 class)\n");
}

TEST_CASE("kiln registry match speaks Forge: dimension names, quantizations, the seed's entry",
          "[registry][cli][planner]") {
  Planted p;
  Run r = p.match({"fp16", "--shape", "batch=16,hidden_size=4096", "--gpu", "NVIDIA H200"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(first_line(r.out) == "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1");
  CHECK(r.out.find("why      exact GPU (nvidiah200), exact shape\n") != std::string::npos);

  r = p.match({"fp8", "--shape", "batch=16,hidden_size=4096", "--gpu", "NVIDIA H200"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("exact shape, dtype fp16 for fp8") != std::string::npos);
  CHECK(p.match({"awq", "--shape", "B=16,H=4096"}).exit_code == 0);

  // Forge's own example entry (hidden_size only) answers a query that also names batch.
  const std::string seed = std::string(KILN_SOURCE_DIR) + "/tests/data/registry/forge_seed";
  r = kiln_cmd({"registry", "--dir", seed, "match", "rmsnorm", "--dtype", "fp16", "--shape",
                "batch=16,hidden_size=4096", "--gpu", "NVIDIA GeForce RTX 4070", "--allow-unhashed"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(first_line(r.out) == "triton_rmsnorm_rtx4070_fp16_h4096_v1");
  CHECK(r.err.starts_with("kiln: warning: triton_rmsnorm_rtx4070_fp16_h4096_v1 has no source_sha256"));
  CHECK(kiln_cmd({"registry", "--dir", seed, "verify"}).exit_code == 0);
}

TEST_CASE("an unknown evidence level leaves the registry readable", "[registry][cli][planner]") {
  Planted p;
  p.add(2, 9.0)["evidence_level"] = "fleet_level";
  p.save();
  Run r = kiln_cmd({"registry", "--dir", p.reg, "list"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(lines(r.out) == 5);  // the header and four entries
  r = p.match({"fp16", "--shape", "B=16,H=4096"});
  REQUIRE(r.exit_code == 0);
  CHECK(first_line(r.out) == "cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v1");
  CHECK(r.err ==
        "kiln: warning: skipped cuda_rmsnorm_nvidiah200_fp16_b16_h4096_v2: unknown evidence level "
        "\"fleet_level\" (expected op_level, runtime_level or endpoint_level)\n");
  CHECK(kiln_cmd({"registry", "--dir", p.reg, "verify"}).exit_code == 0);
}

TEST_CASE("kiln registry show and list --json print entries as stored", "[registry][cli][planner]") {
  const std::string forge_id = "triton_layernorm_a10g_fp16_b8_h2048_v1";
  Run r = kiln_cmd({"registry", "--dir", kExample, "show", forge_id});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto shown = nlohmann::json::parse(r.out);
  auto stored = nlohmann::json::parse(*kiln::read_file(kExample + "/verified_kernels.json"));
  CHECK(shown == stored["kernels"][0]);
  CHECK(shown["skill_ids"].size() == 2);
  for (const char* invented : {"speedup_interval", "timing", "source_sha256", "params", "task_name"})
    CHECK_FALSE(shown.contains(invented));
  CHECK_FALSE(shown["verification"].contains("max_abs_error"));
  r = kiln_cmd({"--json", "registry", "--dir", kExample, "list"});
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out) == stored["kernels"]);
  r = kiln_cmd({"registry", "--dir", kExample, "show", "nope"});
  CHECK(r.exit_code == 1);
  CHECK(r.err == "kiln: no kernel nope in " + kExample + "\n");
}

TEST_CASE("kiln registry match --help lists the rules in order", "[registry][cli][planner]") {
  Run r = kiln_cmd({"registry", "match", "--help"});
  CHECK(r.exit_code == 0);
  size_t at = 0;
  for (const char* step : {"Rules, in order", "1. op equal", "2. only what `kiln registry verify` accepts", "3. GPU",
                           "4. shape", "5. ties", "--max-shape-ratio", "--allow-unhashed"}) {
    INFO(step);
    size_t found = r.out.find(step);
    CHECK(found != std::string::npos);
    if (std::string(step).starts_with("--")) continue;  // the options come before the rules
    CHECK(found >= at);
    at = found;
  }
}
