// Enums at the edge: message structs hold Backend, Stage, Purpose and TestStatus, and the codec writes each
// as the one word the wire has always carried. The bytes must not change (older peers and stored records
// read them), a word the codec does not know is a decode error naming the field, and older writers' ways
// of saying something are read as today's.
#include <catch2/catch.hpp>

#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "kiln/core/files.h"
#include "kiln/core/hash.h"
#include "kiln/proto/codec.h"
#include "kiln/proto/ids.h"
#include "kiln/proto/payloads.h"
#include "kiln/proto/wire.h"
#include "kiln/testing/test_status.h"

using namespace kiln::proto;

namespace {

// The fields as strings, as every writer before the enums declared them.
struct StringFields {
  std::string stage;
  std::string purpose;
  std::string backend;
  template <class V>
  void fields(V& v) {
    v("stage", stage);
    v("purpose", purpose);
    v("backend", backend);
  }
};

struct EnumFields {
  Stage stage = Stage::kTest;
  Purpose purpose = Purpose::kEval;
  std::optional<Backend> backend;
  template <class V>
  void fields(V& v) {
    v("stage", stage);
    v("purpose", purpose);
    v("backend", backend);
  }
};

struct CapsWords {  // Capabilities as strings
  std::string backend;
  template <class V>
  void fields(V& v) {
    v("backend", backend);
  }
};
struct ReadyWords {
  CapsWords caps;
  template <class V>
  void fields(V& v) {
    v("caps", caps);
  }
};

// TestReport.status as every writer before the enum declared it.
struct StatusWord {
  std::string status;
  std::string message;
  template <class V>
  void fields(V& v) {
    v("status", status);
    v("message", message);
  }
};
struct StatusEnum {
  std::optional<TestStatus> status;
  std::string message;
  template <class V>
  void fields(V& v) {
    v("status", status);
    v("message", message);
  }
};
struct TestWords {  // a ScoreResult's "test" as strings
  StatusWord test;
  template <class V>
  void fields(V& v) {
    v("test", test);
  }
};

// Every test status with the word the wire has always carried for it, spelled out here rather than read
// from ids.h, so a changed word fails this test.
const std::pair<TestStatus, const char*> kStatusWords[] = {
    {TestStatus::kOk, "ok"},
    {TestStatus::kMismatch, "mismatch"},
    {TestStatus::kInputModified, "input_modified"},
    {TestStatus::kWrongShape, "wrong_shape"},
    {TestStatus::kNonFinite, "nonfinite"},
    {TestStatus::kCrashed, "crashed"},
    {TestStatus::kTimedOut, "timed_out"},
    {TestStatus::kLoadFailed, "load_failed"},
    {TestStatus::kEvaluatorError, "evaluator_error"},
};

std::string golden(const std::string& name) {
  auto r = kiln::read_file(std::string(KILN_SOURCE_DIR) + "/proto-msgs/golden/" + name + ".msgpack");
  REQUIRE(r.is_ok());
  return *r;
}

}  // namespace

TEST_CASE("an enum field is written byte for byte as its word", "[proto][codec][enums]") {
  for (Stage s : {Stage::kPropose, Stage::kCompile, Stage::kTest}) {
    for (Purpose p : {Purpose::kEval, Purpose::kConfirm}) {
      for (std::optional<Backend> b :
           {std::optional<Backend>(), std::optional(Backend::kCpu), std::optional(Backend::kCuda)}) {
        const EnumFields typed{s, p, b};
        const StringFields words{std::string(name(s)), std::string(name(p)), std::string(word_of(b))};
        CHECK(encode(typed) == encode(words));
        auto back = decode<EnumFields>(encode(words));
        REQUIRE(back.is_ok());
        CHECK(back->stage == s);
        CHECK(back->purpose == p);
        CHECK(back->backend == b);
      }
    }
  }
  // An empty optional is the empty string the old field held when it named nothing.
  CHECK(encode(EnumFields{}) == encode(StringFields{"test", "eval", ""}));
}

TEST_CASE("a test status is written byte for byte as the word it always was", "[proto][codec][enums]") {
  CHECK(std::size(kStatusWords) == std::size(WireWords<TestStatus>::kWords));  // every status is listed here
  for (const auto& [status, word] : kStatusWords) {
    INFO(word);
    CHECK(name(status) == word);
    CHECK(encode(StatusEnum{status, "m"}) == encode(StatusWord{word, "m"}));
    // A whole report writes the word, as the string field did.
    TestReport typed;
    typed.status = status;
    auto as_words = decode<StatusWord>(encode(typed));
    REQUIRE(as_words.is_ok());
    CHECK(as_words->status == word);
    auto back = decode<TestReport>(encode(StatusWord{word, "m"}));
    REQUIRE(back.is_ok());
    CHECK(back->status == status);
    CHECK(back->message == "m");
    auto parsed = parse_test_status(word);
    REQUIRE(parsed.is_ok());
    CHECK(*parsed == status);
    // Nested in a ScoreResult, where the scorer reads it.
    auto result = decode<ScoreResult>(encode(TestWords{{word, ""}}));
    REQUIRE(result.is_ok());
    CHECK(result->test.status == status);
  }
  // No test ran (a propose or compile stage): the empty string the old field held, both ways.
  ScoreResult compile_failed;
  compile_failed.stage = Stage::kCompile;
  auto back = decode<ScoreResult>(encode(compile_failed));
  REQUIRE(back.is_ok());
  CHECK_FALSE(back->test.status.has_value());
  CHECK(encode(*back) == encode(compile_failed));
  CHECK(decode<TestWords>(encode(compile_failed))->test.status.empty());
  CHECK(encode(StatusEnum{}) == encode(StatusWord{}));
  auto empty = decode<TestReport>(encode(StatusWord{}));
  REQUIRE(empty.is_ok());
  CHECK_FALSE(empty->status.has_value());
}

TEST_CASE("a test status the codec does not know is a decode error naming the field and the word",
          "[proto][codec][enums]") {
  const std::string expected =
      "(expected ok, mismatch, input_modified, wrong_shape, nonfinite, crashed, timed_out, load_failed or "
      "evaluator_error)";
  auto report = decode<TestReport>(encode(StatusWord{"passed", ""}));
  REQUIRE_FALSE(report.is_ok());
  CHECK(report.status().code() == kiln::StatusCode::kInvalidArgument);
  CHECK(report.status().message() == "field 'status': unknown test status \"passed\" " + expected);
  auto result = decode<ScoreResult>(encode(TestWords{{"OK", ""}}));
  REQUIRE_FALSE(result.is_ok());
  CHECK(result.status().message() == "field 'test.status': unknown test status \"OK\" " + expected);
  auto parsed = parse_test_status("harness_error");
  REQUIRE_FALSE(parsed.is_ok());
  CHECK(parsed.status().message() == "unknown test status \"harness_error\" " + expected);
  CHECK_FALSE(parse_test_status("").is_ok());
}

TEST_CASE("a word the codec does not know is a decode error that names the field", "[proto][codec][enums]") {
  auto bad_stage = decode<ScoreResult>(encode(StringFields{"score", "eval", ""}));
  REQUIRE_FALSE(bad_stage.is_ok());
  CHECK(bad_stage.status().code() == kiln::StatusCode::kInvalidArgument);
  CHECK(bad_stage.status().message() == "field 'stage': unknown stage \"score\" (expected propose, compile or test)");

  auto bad_purpose = decode<TestRequest>(encode(StringFields{"test", "eval2", ""}));
  REQUIRE_FALSE(bad_purpose.is_ok());
  CHECK(bad_purpose.status().message() == "field 'purpose': unknown purpose \"eval2\" (expected eval or confirm)");

  auto bad_backend = decode<CompileRequest>(encode(StringFields{"test", "eval", "tpu"}));
  REQUIRE_FALSE(bad_backend.is_ok());
  CHECK(bad_backend.status().message() == "field 'backend': unknown backend \"tpu\" (expected cpu or cuda)");

  // Where the word is required, the empty string is not one.
  auto empty_stage = decode<ScoreResult>(encode(StringFields{"", "eval", ""}));
  REQUIRE_FALSE(empty_stage.is_ok());
  CHECK(empty_stage.status().message().find("field 'stage'") == 0);

  // Nested: the path says where.
  auto bad_caps = decode<Ready>(encode(ReadyWords{{"gpu"}}));
  REQUIRE_FALSE(bad_caps.is_ok());
  CHECK(bad_caps.status().message() == "field 'caps.backend': unknown backend \"gpu\" (expected cpu or cuda)");
}

TEST_CASE("the golden samples decode into enums", "[proto][codec][enums][golden]") {
  auto ready = decode<Ready>(golden("ready"));
  REQUIRE(ready.is_ok());
  CHECK(ready->caps.backend == Backend::kCpu);
  for (const char* name : {"score_result", "score_result_v2"}) {
    auto sr = decode<ScoreResult>(golden(name));
    REQUIRE(sr.is_ok());
    CHECK(sr->stage == Stage::kTest);
    CHECK(sr->purpose == Purpose::kEval);
    CHECK_FALSE(sr->test.worker.backend.has_value());  // written as "" then
    CHECK(sr->test.status == TestStatus::kOk);
  }
}

TEST_CASE("older writers' confirmations are read as today's", "[proto][codec][enums]") {
  // Before purpose carried it alone, a confirmation was the program id "<program_id>#confirm".
  TestRequest test;
  test.cand.program_id = "c1/p3#confirm";
  auto t = decode<TestRequest>(encode(test));
  REQUIRE(t.is_ok());
  CHECK(t->cand.program_id == "c1/p3");
  CHECK(t->purpose == Purpose::kConfirm);

  CompileRequest compile;
  compile.cand.program_id = "c1/p3#confirm";
  auto c = decode<CompileRequest>(encode(compile));
  REQUIRE(c.is_ok());
  CHECK(c->cand.program_id == "c1/p3");
  CHECK(c->purpose == Purpose::kConfirm);

  ScoreResult score;
  score.cand.program_id = "c1/p3#confirm";
  score.purpose = Purpose::kEval;
  auto s = decode<ScoreResult>(encode(score));
  REQUIRE(s.is_ok());
  CHECK(s->cand.program_id == "c1/p3");
  CHECK(s->purpose == Purpose::kConfirm);

  // Today's: the purpose alone, the id as it is.
  score.cand.program_id = "c1/p3";
  score.purpose = Purpose::kConfirm;
  auto today = decode<ScoreResult>(encode(score));
  REQUIRE(today.is_ok());
  CHECK(today->cand.program_id == "c1/p3");
  CHECK(today->purpose == Purpose::kConfirm);
  // A compile request says nothing of a purpose unless it is one: an older one is a first evaluation.
  CHECK(decode<CompileRequest>(encode(CompileRequest{}))->purpose == Purpose::kEval);
}

TEST_CASE("a package has one identity: its task id is its blob's name", "[proto][task_id]") {
  const FileMap files{{"task.yaml", Bytes{"name: t\n"}}, {"kernel.cpp", Bytes{"int x;\n"}}};
  CHECK(task_id(files) == kiln::sha256_hex(task_blob_bytes(files)));
  CHECK(task_id(files).size() == 64);
  auto back = decode<TaskFiles>(task_blob_bytes(files));
  REQUIRE(back.is_ok());
  CHECK(back->files == files);
  // Any change of a name or a byte is another package.
  FileMap renamed = files;
  renamed.emplace("notes.md", Bytes{});
  CHECK(task_id(renamed) != task_id(files));
  FileMap edited = files;
  edited["kernel.cpp"].data += " ";
  CHECK(task_id(edited) != task_id(files));
  CHECK(task_id(FileMap(files)) == task_id(files));
}
