#include "kiln/compiler/nvcc_graph.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <tuple>

#include "kiln/core/files.h"
#include "kiln/sandbox/sandbox.h"

using kiln::compiler::nvcc_graph;
using kiln::compiler::NvccPlan;
using kiln::compiler::parse_nvcc_dryrun;

namespace {

// `nvcc -O3 -shared -Xcompiler -fPIC -gencode arch=compute_90,code=[sm_90,compute_90] -cudart shared
// -Xptxas -v -I. -D KILN_DEFINES_GO_HERE_=1 -o out.so kernel.cu -dryrun -keep -keep-dir kiln-steps`, nvcc 13.0.
std::string dryrun13() {
  auto text = kiln::read_file(KILN_SOURCE_DIR "/tests/data/compiler/nvcc-13.0-dryrun.txt");
  REQUIRE(text.is_ok());
  return *text;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// The dry run with every line for which `drop(line)` holds left out.
template <class Pred>
std::string without_lines(const std::string& text, Pred drop) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string line = text.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos + 1);
    pos = eol == std::string::npos ? text.size() : eol + 1;
    if (!drop(line)) out += line;
  }
  return out;
}

}  // namespace

TEST_CASE("nvcc's dry run becomes a plan of its steps", "[compiler][nvcc_graph]") {
  auto plan = parse_nvcc_dryrun(dryrun13(), "kiln-steps");
  REQUIRE(plan.is_ok());
  CHECK(contains(plan->host_preprocess, " -E "));
  CHECK(contains(plan->host_preprocess, "kernel.cpp4.ii"));
  CHECK(contains(plan->device_preprocess, "-D__CUDA_ARCH__=900"));
  CHECK(contains(plan->device_preprocess, "kernel.cpp1.ii"));
  CHECK(contains(plan->cicc, "$CICC_PATH/cicc"));
  CHECK(contains(plan->ptxas, "-arch=sm_90"));
  CHECK(contains(plan->host_compile, "kernel.cudafe1.cpp"));
  CHECK(plan->host_compiler == "gcc");
  // The module id is written before cudafe++ and cicc run: neither generates it.
  CHECK(plan->module_id_file == "kiln-steps/kernel.module_id");
  CHECK(!contains(plan->front_end, "--gen_module_id_file"));
  CHECK(contains(plan->front_end, "kiln-steps/kernel.module_id"));
  // The fat binary is created as a file and linked in as its own object, not as nvcc's include.
  CHECK(plan->fatbin_include == "kernel.fatbin.c");
  CHECK(plan->fatbin_file == "kiln-steps/kernel.fatbin");
  CHECK(!contains(plan->fatbinary, "--embedded-fatbin"));
  CHECK(contains(plan->link, "kiln-steps/kiln_fatbin.o"));
  CHECK(!contains(plan->link, "out_dlink"));
  CHECK(contains(plan->link, "-lcudart"));
  // The variables nvcc sets for its tools, the plain ones only.
  bool cicc_path = false;
  for (const auto& [name, value] : plan->env) {
    CHECK(name != "INCLUDES");
    if (name == "CICC_PATH") cicc_path = value == "/usr/local/cuda/bin/../nvvm/bin";
  }
  CHECK(cicc_path);
}

TEST_CASE("a dry run that is not one target's whole-program build is refused", "[compiler][nvcc_graph]") {
  const std::string text = dryrun13();
  auto refused = [](const std::string& t) {
    auto plan = parse_nvcc_dryrun(t, "kiln-steps");
    REQUIRE(!plan.is_ok());
    return plan.status().message();
  };
  SECTION("two targets: two ptxas steps") {
    std::string twice = text;
    size_t at = twice.find("#$ ptxas");
    size_t eol = twice.find('\n', at);
    twice.insert(eol + 1, twice.substr(at, eol - at + 1));
    CHECK(contains(refused(twice), "ptxas"));
  }
  SECTION("no cicc") {
    CHECK(
        contains(refused(without_lines(text, [](const std::string& l) { return contains(l, "/cicc\""); })), "no cicc"));
  }
  SECTION("a step nobody knows") {
    CHECK(contains(refused(text + "#$ mystery-tool --do-things\n"), "unexpected step 'mystery-tool'"));
  }
  SECTION("no device link to take the fat binary's place") {
    CHECK(contains(refused(without_lines(text, [](const std::string& l) { return contains(l, "link.stub"); })),
                   "device link"));
  }
  SECTION("files outside the folder asked for") {
    auto plan = parse_nvcc_dryrun(text, "elsewhere");
    REQUIRE(!plan.is_ok());
    CHECK(contains(plan.status().message(), "is not in elsewhere"));
  }
  SECTION("no commands at all") { CHECK(contains(refused("nvcc fatal   : Unknown option '-foo'\n"), "no ")); }
}

TEST_CASE("the graph's files and script", "[compiler][nvcc_graph]") {
  auto plan = parse_nvcc_dryrun(dryrun13(), "kiln-steps");
  REQUIRE(plan.is_ok());
  const std::string id = kiln::compiler::nvcc_module_id("0123456789abcdef0123", "kernel.cu");
  CHECK(id == "_01234567_9_kernel_cu_89abcdef");
  auto g = nvcc_graph(*plan, id);
  std::map<std::string, std::string> files(g.files.begin(), g.files.end());
  CHECK(files.at("kiln-steps/kernel.module_id") == id);
  const std::string& include = files.at("kiln-steps/kernel.fatbin.c");
  CHECK(contains(include, "__fatDeviceText"));
  CHECK(contains(include, "kiln_fatbin_data"));
  const std::string& assembly = files.at("kiln-steps/kiln_fatbin.s");
  CHECK(contains(assembly, ".section .nv_fatbin"));
  CHECK(contains(assembly, ".incbin \"kiln-steps/kernel.fatbin\""));
  // The host compile waits for the host front end and cicc, the link for everything.
  const std::string& s = g.script;
  CHECK(contains(s, "export CICC_PATH='/usr/local/cuda/bin/../nvvm/bin'"));
  const size_t cicc = s.find("$CICC_PATH/cicc");
  const size_t wait_host = s.find("wait $host &&");
  const size_t host_compile = s.find("kernel.cudafe1.cpp\" -o");
  const size_t wait_device = s.find("wait $device || exit 1");
  const size_t link = s.find("\"kiln-steps/kiln_fatbin.o\"");
  REQUIRE(cicc != std::string::npos);
  REQUIRE(wait_host != std::string::npos);
  REQUIRE(host_compile != std::string::npos);
  REQUIRE(wait_device != std::string::npos);
  REQUIRE(link != std::string::npos);
  CHECK(cicc < wait_host);
  CHECK(wait_host < host_compile);
  CHECK(host_compile < wait_device);
  CHECK(wait_device < link);
  for (const auto& step : kiln::compiler::nvcc_graph_steps()) CHECK(contains(s, "'kiln-steps/" + step + ".err'"));
}

// The script's control flow, with each step a command that says its name (and one that fails): every step
// runs after what it needs, its output lands in its files, and a failure anywhere ends the script with 1
// once the other branch is done.
TEST_CASE("the graph script runs the steps in their order and stops on a failure", "[compiler][nvcc_graph]") {
  NvccPlan plan;
  plan.keep_dir = "k";
  plan.module_id_file = "k/m.module_id";
  plan.fatbin_include = "f.c";
  plan.fatbin_file = "k/f.fatbin";
  plan.fatbin_object = "k/kiln_fatbin.o";
  plan.host_compiler = "true";
  auto say = [](const std::string& name, const std::string& after) {
    // Fails unless the file `after` wrote exists; then leaves its own.
    std::string cmd = "echo " + name + " && ";
    if (!after.empty()) cmd += "test -e k/" + after + ".done && ";
    return cmd + "touch k/" + name + ".done";
  };
  plan.host_preprocess = say("hp", "");
  plan.front_end = say("fe", "hp");
  plan.device_preprocess = say("dp", "");
  plan.cicc = say("cicc", "dp");
  plan.ptxas = say("ptxas", "cicc");
  plan.fatbinary = say("fatbinary", "ptxas");
  plan.host_compile = "test -e k/fe.done && " + say("hc", "cicc");
  plan.link = "test -e k/fatbinary.done && " + say("link", "hc");

  auto run = [](const NvccPlan& p) {
    kiln::TempDir dir("kiln-graph-test");
    REQUIRE(kiln::make_dirs(dir.path() + "/k").is_ok());
    auto g = nvcc_graph(p, "_id");
    for (const auto& [name, content] : g.files) REQUIRE(kiln::write_file(dir.path() + "/" + name, content).is_ok());
    REQUIRE(kiln::write_file(dir.path() + "/k/steps.sh", g.script).is_ok());
    kiln::sandbox::SandboxOptions o;
    o.argv = {"/bin/sh", "k/steps.sh"};
    o.working_dir = dir.path();
    o.env = {"PATH=/usr/bin:/bin"};
    o.timeout_s = 30;
    auto r = kiln::sandbox::run_sandboxed(o);
    REQUIRE(r.is_ok());
    auto link_out = kiln::read_file(dir.path() + "/k/link.out");
    auto cicc_out = kiln::read_file(dir.path() + "/k/cicc.out");
    return std::make_tuple(r->exit_code, link_out.is_ok() ? *link_out : "", cicc_out.is_ok() ? *cicc_out : "");
  };
  SECTION("every step succeeds") {
    auto [code, link_out, cicc_out] = run(plan);
    CHECK(code == 0);
    CHECK(link_out == "link\n");
    CHECK(cicc_out == "cicc\n");
  }
  SECTION("the host front end fails") {
    plan.front_end = "false";
    auto [code, link_out, cicc_out] = run(plan);
    CHECK(code == 1);
    CHECK(link_out.empty());
    CHECK(cicc_out == "cicc\n");  // the device side went on meanwhile, and was waited for
  }
  SECTION("cicc fails") {
    plan.cicc = "false";
    auto [code, link_out, cicc_out] = run(plan);
    CHECK(code == 1);
    CHECK(link_out.empty());
  }
  SECTION("ptxas fails") {
    plan.ptxas = "false";
    auto [code, link_out, cicc_out] = run(plan);
    CHECK(code == 1);
    CHECK(link_out.empty());
  }
  SECTION("the link fails") {
    plan.link = "false";
    auto [code, link_out, cicc_out] = run(plan);
    CHECK(code == 1);
  }
}
