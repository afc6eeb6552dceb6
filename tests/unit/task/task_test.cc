#include <archive.h>
#include <archive_entry.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "kiln/core/files.h"
#include "kiln/proto/payloads.h"
#include "kiln/task/task.h"

namespace fs = std::filesystem;
using kiln::proto::Bytes;
using kiln::proto::FileMap;

namespace {

std::string fixture(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/tests/data/tasks/" + name; }

FileMap load(const std::string& name) {
  auto files = kiln::task::load_package(fixture(name));
  REQUIRE(files.is_ok());
  return *files;
}

std::string error_of(const FileMap& files) {
  auto spec = kiln::task::parse_task(files);
  REQUIRE_FALSE(spec.is_ok());
  CHECK(spec.status().code() == kiln::StatusCode::kInvalidArgument);
  CHECK(spec.status().message().find('\n') == std::string::npos);  // one line
  return spec.status().message();
}

// task.yaml of the good package with `from` replaced by `to`.
FileMap good_with_yaml_edit(const std::string& from, const std::string& to) {
  FileMap files = load("good_cpu");
  std::string& yaml = files["task.yaml"].data;
  auto pos = yaml.find(from);
  REQUIRE(pos != std::string::npos);
  yaml.replace(pos, from.size(), to);
  return files;
}

struct TarEntry {
  std::string name;
  std::string content;
  unsigned type = AE_IFREG;
  std::string link;
};

void write_archive(const std::string& path, const std::vector<TarEntry>& entries, bool zip) {
  archive* a = archive_write_new();
  if (zip) {
    archive_write_set_format_zip(a);
  } else {
    archive_write_add_filter_gzip(a);
    archive_write_set_format_pax_restricted(a);
  }
  REQUIRE(archive_write_open_filename(a, path.c_str()) == ARCHIVE_OK);
  for (const auto& e : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.name.c_str());
    archive_entry_set_filetype(entry, e.type);
    archive_entry_set_perm(entry, 0644);
    if (e.type == AE_IFLNK) archive_entry_set_symlink(entry, e.link.c_str());
    archive_entry_set_size(entry, e.type == AE_IFREG ? static_cast<la_int64_t>(e.content.size()) : 0);
    REQUIRE(archive_write_header(a, entry) == ARCHIVE_OK);
    if (e.type == AE_IFREG) archive_write_data(a, e.content.data(), e.content.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
}

void write_tarball(const std::string& path, const std::vector<TarEntry>& entries) {
  write_archive(path, entries, false);
}
void write_zip(const std::string& path, const std::vector<TarEntry>& entries) { write_archive(path, entries, true); }

}  // namespace

TEST_CASE("the good CPU package loads and validates", "[task]") {
  FileMap files = load("good_cpu");
  CHECK(files.size() == 4);
  auto spec = kiln::task::parse_task(files);
  INFO((spec.is_ok() ? std::string() : spec.status().message()));
  REQUIRE(spec.is_ok());
  CHECK(spec->name == "rmsnorm_cpu");
  CHECK(spec->op == "rmsnorm");
  CHECK(spec->backend == kiln::proto::Backend::kCpu);
  CHECK(spec->dtype == "fp32");
  REQUIRE(spec->inputs.size() == 2);
  CHECK(spec->inputs[0].shape == std::vector<std::string>{"B", "H"});
  CHECK(spec->inputs[0].init == kiln::task::InitKind::kNormal);
  CHECK(spec->inputs[1].init == kiln::task::InitKind::kUniform);
  CHECK(spec->inputs[1].init_a == Approx(0.5));
  CHECK(spec->inputs[1].init_b == Approx(1.5));
  REQUIRE(spec->outputs.size() == 1);
  CHECK(spec->outputs[0].dtype == kiln::task::DType::kF32);
  REQUIRE(spec->scalars.size() == 1);
  CHECK(spec->scalars[0].first == "eps");
  CHECK(spec->scalars[0].second == Approx(1e-6));
  CHECK(spec->correctness_cases.size() == 3);
  CHECK(spec->correctness_cases[1].at("H") == 67);
  CHECK(spec->seeds == 2);
  CHECK(spec->rtol == Approx(1e-4));
  CHECK(spec->atol == Approx(1e-5));
  REQUIRE(spec->benchmark_cases.size() == 1);
  CHECK(kiln::task::dims_string(spec->benchmark_cases[0]) == "B=16,H=1024");
  REQUIRE(spec->params.size() == 1);
  CHECK(spec->params[0].first == "UNROLL");
  CHECK(spec->params[0].second == std::vector<std::string>{"1", "2", "4"});
  CHECK(spec->baselines.empty());
  CHECK(spec->kernel_file == "kernel.cpp");
  CHECK(spec->reference_file == "reference.cpp");
  CHECK(spec->instructions.find("RMSNorm") != std::string::npos);

  auto shape = kiln::task::shape_for(spec->inputs[1], spec->benchmark_cases[0]);
  REQUIRE(shape.is_ok());
  CHECK(*shape == std::vector<int64_t>{1024});
  CHECK_FALSE(kiln::task::shape_for(spec->inputs[0], kiln::task::Dims{{"H", 4}}).is_ok());

  std::string id = kiln::proto::task_id(files);
  CHECK(id.size() == 64);
  files["instructions.md"].data += " ";
  CHECK(kiln::proto::task_id(files) != id);
}

TEST_CASE("broken fixture packages fail with one precise line", "[task]") {
  CHECK(error_of(load("broken_missing_file")) ==
        "reference.cpp: missing (required for backend cpu; or a PyTorch reference.py)");
  CHECK(error_of(load("broken_bad_yaml")).starts_with("task.yaml: line 4: "));
  CHECK(error_of(load("broken_unknown_key")) == "task.yaml: warmup: unknown key");
  CHECK(error_of(load("broken_no_evolve")) == "kernel.cpp: no [EVOLVE_START] ... [EVOLVE_END] region");
  CHECK(error_of(load("broken_undefined_dim")) ==
        "task.yaml: correctness.cases[0]: dim N is not defined (the shape of x uses it)");
  CHECK(error_of(load("broken_bad_dtype")) ==
        "task.yaml: inputs[1].dtype: expected one of fp32, fp16, bf16, fp64, int32, int64, int8, uint8, got \"fp17\"");
  CHECK(error_of(load("broken_bad_dim_value")) ==
        "task.yaml: correctness.cases[1].H: expected a positive integer, got \"abc\"");
}

TEST_CASE("a package cannot ask for unbounded work or tensors whose size overflows", "[task]") {
  std::string many;
  for (int i = 0; i < 65; ++i) many += std::string(i ? ", " : "") + "{B: 1, H: " + std::to_string(i + 1) + "}";
  CHECK(error_of(good_with_yaml_edit("[{B: 1, H: 64}, {B: 4, H: 67}, {B: 3, H: 128}]", "[" + many + "]")) ==
        "task.yaml: correctness.cases: 65 cases; at most 64 are allowed");
  CHECK(error_of(good_with_yaml_edit("seeds: 2", "seeds: 1000000")) == "task.yaml: correctness.seeds: at most 16");
  // 2^62 x 2^62 elements: the element count overflows int64.
  CHECK(error_of(good_with_yaml_edit("{B: 16, H: 1024}", "{B: 4611686018427387904, H: 4611686018427387904}")) ==
        "task.yaml: benchmark.cases[0]: x: the element count of its shape overflows int64");
  CHECK(error_of(good_with_yaml_edit("{B: 16, H: 1024}", "{B: 65536, H: 65537}")) ==
        "task.yaml: benchmark.cases[0]: x would be over 16 GiB");
  CHECK(kiln::task::parse_task(good_with_yaml_edit("{B: 16, H: 1024}", "{B: 65536, H: 65536}")).is_ok());  // 16 GiB
}

TEST_CASE("every bound of a package names its field", "[task]") {
  auto list = [](int n, const std::string& open, const std::string& close, const std::string& item_prefix,
                 const std::string& item_suffix) {
    std::string out = open;
    for (int i = 0; i < n; ++i) out += (i ? ", " : "") + item_prefix + std::to_string(i) + item_suffix;
    return out + close;
  };
  auto lines = [](int n, const std::string& prefix, const std::string& suffix) {
    std::string out;
    for (int i = 0; i < n; ++i) out += prefix + std::to_string(i) + suffix;
    return out;
  };
  // Benchmark cases: at most 16.
  CHECK(
      error_of(good_with_yaml_edit("cases: [{B: 16, H: 1024}]", "cases: " + list(17, "[", "]", "{B: 1, H: 1", "}"))) ==
      "task.yaml: benchmark.cases: 17 cases; at most 16 are allowed");
  // Dims per case: at most 16.
  CHECK(error_of(good_with_yaml_edit("{B: 16, H: 1024}", list(15, "{B: 16, H: 1024, ", "}", "D", ": 1"))) ==
        "task.yaml: benchmark.cases[0]: 17 dims; at most 16 are allowed");
  // Bytes per case: each tensor within 16 GiB, all of them over 64 GiB (five fp32 tensors of 2^32).
  FileMap big = good_with_yaml_edit("{B: 16, H: 1024}", "{B: 65536, H: 65536}");
  std::string& yaml = big["task.yaml"].data;
  const std::string y = "  - {name: y, dtype: fp32, shape: [B, H]}\n";
  REQUIRE(yaml.find(y) != std::string::npos);
  yaml.replace(yaml.find(y), y.size(),
               y + "  - {name: z1, dtype: fp32, shape: [B, H]}\n  - {name: z2, dtype: fp32, shape: [B, H]}\n"
                   "  - {name: z3, dtype: fp32, shape: [B, H]}\n");
  CHECK(error_of(big) == "task.yaml: benchmark.cases[0]: the tensors of this case would be over 64 GiB");
  // Tensors: at most 64 inputs (and 64 outputs); x and 64 more here.
  CHECK(error_of(good_with_yaml_edit("  - {name: w, dtype: fp32, shape: [H], init: \"uniform(0.5, 1.5)\"}\n",
                                     lines(64, "  - {name: w", ", dtype: fp32, shape: [H]}\n"))) ==
        "task.yaml: inputs: 65 tensors; at most 64 are allowed");
  // Scalars: at most 64.
  CHECK(error_of(good_with_yaml_edit("scalars: {eps: 1.0e-6}", "scalars: " + list(65, "{", "}", "s", ": 1.0"))) ==
        "task.yaml: scalars: 65 scalars; at most 64 are allowed");
  // Template parameters: at most 16, each with at most 64 values, at most 65536 combinations.
  CHECK(error_of(good_with_yaml_edit("  UNROLL: [1, 2, 4]", lines(17, "  P", ": [1]\n"))) ==
        "task.yaml: params: 17 parameters; at most 16 are allowed");
  CHECK(error_of(good_with_yaml_edit("  UNROLL: [1, 2, 4]", "  UNROLL: " + list(65, "[", "]", "", ""))) ==
        "task.yaml: params.UNROLL: 65 values; at most 64 are allowed");
  const std::string twenty = list(20, "[", "]", "", "");
  CHECK(error_of(good_with_yaml_edit(
            "  UNROLL: [1, 2, 4]", "  A: " + twenty + "\n  B: " + twenty + "\n  C: " + twenty + "\n  D: " + twenty)) ==
        "task.yaml: params.D: the parameters would make over 65536 combinations");
  CHECK(kiln::task::parse_task(
            good_with_yaml_edit("  UNROLL: [1, 2, 4]", "  A: " + twenty + "\n  B: " + twenty + "\n  C: " + twenty))
            .is_ok());  // 8000 combinations
}

TEST_CASE("task.yaml validation names the key path", "[task]") {
  CHECK(error_of(good_with_yaml_edit("name: rmsnorm_cpu", "name: RMS-norm")) ==
        "task.yaml: name: expected [a-z0-9_]+, got \"RMS-norm\"");
  CHECK(error_of(good_with_yaml_edit("backend: cpu", "backend: tpu")) ==
        "task.yaml: backend: expected cuda or cpu, got \"tpu\"");
  CHECK(error_of(good_with_yaml_edit("backend: cpu\n", "")) == "task.yaml: backend: missing (required)");
  CHECK(error_of(good_with_yaml_edit("init: normal", "init: gauss")) ==
        "task.yaml: inputs[0].init: expected normal, uniform(a,b), int(a,b), zeros or ones, got \"gauss\"");
  CHECK(error_of(good_with_yaml_edit("\"uniform(0.5, 1.5)\"", "\"uniform(2, 1)\"")) ==
        "task.yaml: inputs[1].init: expected uniform(a,b) with numbers a < b, got \"uniform(2, 1)\"");
  CHECK(error_of(good_with_yaml_edit("rtol: 1.0e-4", "rtol: -1")) ==
        "task.yaml: correctness.rtol: expected a number >= 0, got \"-1\"");
  CHECK(error_of(good_with_yaml_edit("seeds: 2", "seeds: 0")) ==
        "task.yaml: correctness.seeds: expected a positive integer, got \"0\"");
  CHECK(error_of(good_with_yaml_edit("{B: 16, H: 1024}", "{B: 16}")) ==
        "task.yaml: benchmark.cases[0]: dim H is not defined (the shape of x uses it)");
  CHECK(error_of(good_with_yaml_edit("{B: 16, H: 1024}", "{B: 16, H: 0}")) ==
        "task.yaml: benchmark.cases[0].H: expected a positive integer, got \"0\"");
  CHECK(error_of(good_with_yaml_edit("UNROLL: [1, 2, 4]", "UNROLL: []")) ==
        "task.yaml: params.UNROLL: expected a non-empty list of values, got a list");
  CHECK(error_of(good_with_yaml_edit("UNROLL: [1, 2, 4]", "UNROLL: [1, [2]]")) ==
        "task.yaml: params.UNROLL[1]: expected a number or a name, got a list");
  CHECK(error_of(good_with_yaml_edit("baselines: []", "baselines: [{a: 1}]")) ==
        "task.yaml: baselines[0]: expected a string, got a map");
  CHECK(error_of(good_with_yaml_edit("{name: y, dtype: fp32", "{name: x, dtype: fp32")) ==
        "task.yaml: outputs[0].name: \"x\" is already used by inputs[0]");
  CHECK(error_of(good_with_yaml_edit("{name: y, dtype: fp32, shape: [B, H]}",
                                     "{name: y, dtype: fp32, shape: [B, H], init: zeros}")) ==
        "task.yaml: outputs[0].init: unknown key");
  CHECK(error_of(good_with_yaml_edit("seeds: 2", "seeds: 2\n  seeds: 3")) ==
        "task.yaml: correctness.seeds: duplicate key");
  CHECK(error_of(good_with_yaml_edit("scalars: {eps: 1.0e-6}", "scalars: {eps: tiny}")) ==
        "task.yaml: scalars.eps: expected a number, got \"tiny\"");
  CHECK(error_of(good_with_yaml_edit("correctness:\n  cases: [{B: 1, H: 64}, {B: 4, H: 67}, {B: 3, H: 128}]",
                                     "correctness:\n  cases: []")) ==
        "task.yaml: correctness.cases: expected a non-empty list of cases, got a list");

  // Integer dims in a shape need no case entry; the op defaults to the task name.
  FileMap literal = good_with_yaml_edit("shape: [H], init", "shape: [H, 1], init");
  literal = [&] {
    std::string& y = literal["task.yaml"].data;
    y.erase(y.find("op: rmsnorm\n"), std::string("op: rmsnorm\n").size());
    return literal;
  }();
  auto spec = kiln::task::parse_task(literal);
  REQUIRE(spec.is_ok());
  CHECK(spec->inputs[1].shape == std::vector<std::string>{"H", "1"});
  CHECK(spec->op == "rmsnorm_cpu");

  FileMap no_yaml = load("good_cpu");
  no_yaml.erase("task.yaml");
  CHECK(error_of(no_yaml) == "task.yaml: missing (every package needs one)");
  FileMap empty_yaml = load("good_cpu");
  empty_yaml["task.yaml"].data = "";
  CHECK(error_of(empty_yaml) == "task.yaml: expected a map of keys at the top level, got nothing");
  FileMap cuda = good_with_yaml_edit("backend: cpu", "backend: cuda");
  CHECK(error_of(cuda) == "reference.cu: missing (required for backend cuda; or a PyTorch reference.py)");
  FileMap unbalanced = load("good_cpu");
  std::string& k = unbalanced["kernel.cpp"].data;
  k.erase(k.find("  // [EVOLVE_END]"));
  CHECK(error_of(unbalanced) == "kernel.cpp: line 19: [EVOLVE_START] is never closed by [EVOLVE_END]");
  FileMap evil = load("good_cpu");
  evil["../evil.sh"] = Bytes{"x"};
  CHECK(error_of(evil).find("path escapes the package") != std::string::npos);
}

TEST_CASE("a .tar.gz package loads with its top-level folder stripped", "[task]") {
  kiln::TempDir dir;
  FileMap good = load("good_cpu");
  std::vector<TarEntry> entries{{"rmsnorm/", "", AE_IFDIR, ""}};
  for (const auto& [name, content] : good) entries.push_back({"rmsnorm/" + name, content.data, AE_IFREG, ""});
  std::string tgz = dir.path() + "/rmsnorm.tar.gz";
  write_tarball(tgz, entries);
  auto files = kiln::task::load_package(tgz);
  REQUIRE(files.is_ok());
  CHECK(*files == good);
  CHECK(kiln::proto::task_id(*files) == kiln::proto::task_id(good));

  // Flat tarballs keep their names.
  std::vector<TarEntry> flat;
  for (const auto& [name, content] : good) flat.push_back({"./" + name, content.data, AE_IFREG, ""});
  write_tarball(dir.path() + "/flat.tgz", flat);
  auto flat_files = kiln::task::load_package(dir.path() + "/flat.tgz");
  REQUIRE(flat_files.is_ok());
  CHECK(*flat_files == good);
}

TEST_CASE("tarballs with escaping paths or links are rejected", "[task]") {
  kiln::TempDir dir;
  std::string tgz = dir.path() + "/bad.tar.gz";
  write_tarball(tgz, {{"pkg/task.yaml", "x", AE_IFREG, ""}, {"pkg/../../evil", "x", AE_IFREG, ""}});
  auto r = kiln::task::load_package(tgz);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("path escapes the package") != std::string::npos);

  write_tarball(tgz, {{"/etc/evil", "x", AE_IFREG, ""}});
  r = kiln::task::load_package(tgz);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("absolute path") != std::string::npos);

  write_tarball(tgz, {{"task.yaml", "", AE_IFLNK, "/etc/passwd"}});
  r = kiln::task::load_package(tgz);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("links are not allowed") != std::string::npos);

  // Bounded: one entry larger than the package limit.
  write_tarball(tgz, {{"big.bin", std::string((16u << 20) + 1, 'a'), AE_IFREG, ""}});
  r = kiln::task::load_package(tgz);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == kiln::StatusCode::kResourceExhausted);

  std::ofstream(dir.path() + "/junk.tar.gz") << "not a tarball";
  CHECK_FALSE(kiln::task::load_package(dir.path() + "/junk.tar.gz").is_ok());
  CHECK(kiln::task::load_package(dir.path() + "/missing").status().code() == kiln::StatusCode::kNotFound);
}

TEST_CASE("a .zip package loads like a .tar.gz, with the same path, link and size rules", "[task]") {
  kiln::TempDir dir;
  FileMap good = load("good_cpu");
  std::vector<TarEntry> entries{{"rmsnorm/", "", AE_IFDIR, ""}};
  for (const auto& [name, content] : good) entries.push_back({"rmsnorm/" + name, content.data, AE_IFREG, ""});
  const std::string zip = dir.path() + "/rmsnorm.zip";
  write_zip(zip, entries);
  auto files = kiln::task::load_package(zip);
  INFO((files.is_ok() ? std::string() : files.status().message()));
  REQUIRE(files.is_ok());
  CHECK(*files == good);
  CHECK(kiln::proto::task_id(*files) == kiln::proto::task_id(good));

  write_zip(zip, {{"pkg/task.yaml", "x", AE_IFREG, ""}, {"pkg/../../evil", "x", AE_IFREG, ""}});
  auto r = kiln::task::load_package(zip);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("path escapes the package") != std::string::npos);

  write_zip(zip, {{"/etc/evil", "x", AE_IFREG, ""}});
  r = kiln::task::load_package(zip);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("absolute path") != std::string::npos);

  write_zip(zip, {{"task.yaml", "", AE_IFLNK, "/etc/passwd"}});
  r = kiln::task::load_package(zip);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("links are not allowed") != std::string::npos);

  // Compressed, a 16 MiB entry is a few kB: the bytes inflated are what is bounded.
  write_zip(zip, {{"big.bin", std::string((16u << 20) + 1, 'a'), AE_IFREG, ""}});
  CHECK(std::filesystem::file_size(zip) < (1u << 20));
  r = kiln::task::load_package(zip);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == kiln::StatusCode::kResourceExhausted);

  std::ofstream(dir.path() + "/junk.zip") << "not a zip";
  r = kiln::task::load_package(dir.path() + "/junk.zip");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find(".zip") != std::string::npos);
  r = kiln::task::load_package(dir.path() + "/pkg.rar");
  REQUIRE_FALSE(r.is_ok());
}

TEST_CASE("directory packages: symlinks may not escape, hidden files are skipped", "[task]") {
  kiln::TempDir dir;
  std::string pkg = dir.path() + "/pkg";
  fs::copy(fixture("good_cpu"), pkg, fs::copy_options::recursive);
  REQUIRE(kiln::write_file_atomic(pkg + "/.notes.swp", "editor junk").is_ok());
  auto files = kiln::task::load_package(pkg);
  REQUIRE(files.is_ok());
  CHECK(files->size() == 4);
  CHECK_FALSE(files->count(".notes.swp"));

  fs::create_symlink(pkg + "/kernel.cpp", pkg + "/kernel_link.cpp");  // inside: read as a file
  files = kiln::task::load_package(pkg);
  REQUIRE(files.is_ok());
  CHECK(files->at("kernel_link.cpp") == files->at("kernel.cpp"));

  REQUIRE(kiln::write_file_atomic(dir.path() + "/secret", "s3cret").is_ok());
  fs::create_symlink(dir.path() + "/secret", pkg + "/leak.txt");
  auto r = kiln::task::load_package(pkg);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message() == "leak.txt: symlink points outside the package");
}

TEST_CASE("directory packages are bounded in file count", "[task]") {
  kiln::TempDir dir;
  constexpr int kTooMany = 300;  // above the 256-file bound of load_package
  for (int i = 0; i < kTooMany; ++i) std::ofstream(dir.path() + "/f" + std::to_string(i) + ".txt") << i;
  auto r = kiln::task::load_package(dir.path());
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == kiln::StatusCode::kResourceExhausted);
  CHECK(r.status().message().find("more than 256 files") != std::string::npos);
}
