// A small schema codec over MessagePack. Each message struct lists its fields once:
//
//   struct Foo {
//     std::string name; int64_t n = 0;
//     template <class V> void fields(V& v) { v("name", name); v("n", n); }
//   };
//
// and encode()/decode() turn it into a msgpack map {"v": version, "name": ..., "n": ...}. Readers ignore
// unknown keys and leave missing keys at their defaults; a key present with the wrong type is an error.
// Decoding is bounded (unpack limits, whole frame consumed) so untrusted input can never crash a reader.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::proto {

// The envelope's "v". Added keys leave it alone (old readers ignore them); it goes up when a key keeps
// its type but changes meaning, so a reader or a stored record can tell which meaning it holds. Every
// reader accepts any version >= 1.
//   1: the first schema.
//   2: EvalResult's timing fields (runtime, runtime_improvement, runtime_stats, improve_over_baseline)
//      and CampaignInfo.best_speedup* summarize every benchmark case (geometric means) instead of the
//      first one; with one case they are unchanged.
//   3: the task package of a ProposalRequest, CompileRequest or TestRequest and a TestRequest's reference
//      may travel as blobs of the broker's store (task_blob, reference_blob): `files` or `reference_so`
//      empty then means "fetch the blob", not "no files".
inline constexpr int64_t kSchemaVersion = 3;

// Raw bytes: encoded as msgpack bin, where std::string is encoded as str.
struct Bytes {
  std::string data;
  bool operator==(const Bytes&) const = default;
};

using FileMap = std::map<std::string, Bytes>;  // relative path -> content

struct DecodeLimits {
  size_t max_frame_bytes = 64u << 20;
  size_t max_array = 1u << 20;
  size_t max_map = 1u << 16;
  size_t max_str = 16u << 20;
  size_t max_bin = 64u << 20;
  size_t max_depth = 32;
};

// An enum that travels as a word: a specialization lists every value with the one word the wire spells
// it as, and what the words name (for errors). A message field of such an enum is written as its word and
// read back from it; a word not in the list is a decode error that names the field and the words it
// expected. std::optional<E> travels as "" when empty, so a field whose old string could be empty keeps
// its bytes.
//
//   template <> struct WireWords<Stage> {
//     static constexpr std::string_view kWhat = "stage";
//     static constexpr std::pair<Stage, std::string_view> kWords[] = {{Stage::kPropose, "propose"}, ...};
//   };
template <class E>
struct WireWords;

template <class E>
concept WireEnum = std::is_enum_v<E> && requires {
  WireWords<E>::kWords;
  WireWords<E>::kWhat;
};

// The word of `value` ("" for a value the list lacks, which a complete list never does).
template <WireEnum E>
constexpr std::string_view word_of(E value) {
  for (const auto& [e, word] : WireWords<E>::kWords)
    if (e == value) return word;
  return {};
}

// The word of `value`, "" when it is empty (as the wire writes it).
template <WireEnum E>
constexpr std::string_view word_of(const std::optional<E>& value) {
  return value ? word_of(*value) : std::string_view();
}

// The value `word` names; nullopt for any other word.
template <WireEnum E>
constexpr std::optional<E> enum_of(std::string_view word) {
  for (const auto& [e, w] : WireWords<E>::kWords)
    if (w == word) return e;
  return std::nullopt;
}

// "a, b or c": the words of E, for messages.
template <WireEnum E>
std::string words_of() {
  std::string out;
  const size_t n = std::size(WireWords<E>::kWords);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? " or " : ", ";
    out += WireWords<E>::kWords[i].second;
  }
  return out;
}

// The value `word` names, or invalid_argument: 'unknown stage "x" (expected propose, compile or test)'.
template <WireEnum E>
Result<E> parse_word(std::string_view word) {
  if (auto e = enum_of<E>(word)) return *e;
  return invalid_argument("unknown " + std::string(WireWords<E>::kWhat) + " \"" + std::string(word) + "\" (expected " +
                          words_of<E>() + ")");
}

namespace detail {
class Packer;      // wraps msgpack::packer over a buffer
struct ObjectRef;  // wraps const msgpack::object*
}  // namespace detail

template <class T>
concept Describable = requires(T& t, int& v) {
  t.fields(v);
};

class Writer {
 public:
  Writer();
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void operator()(std::string_view key, const int64_t& v);
  void operator()(std::string_view key, const int& v);
  void operator()(std::string_view key, const double& v);
  void operator()(std::string_view key, const bool& v);
  void operator()(std::string_view key, const std::string& v);
  void operator()(std::string_view key, const Bytes& v);
  void operator()(std::string_view key, const std::vector<std::string>& v);
  void operator()(std::string_view key, const std::vector<int64_t>& v);
  void operator()(std::string_view key, const std::vector<double>& v);
  void operator()(std::string_view key, const std::map<std::string, std::string>& v);
  void operator()(std::string_view key, const std::map<std::string, double>& v);
  void operator()(std::string_view key, const std::map<std::string, int64_t>& v);
  void operator()(std::string_view key, const FileMap& v);

  template <WireEnum E>
  void operator()(std::string_view key, const E& v) {
    word(key, word_of(v));
  }
  template <WireEnum E>
  void operator()(std::string_view key, const std::optional<E>& v) {
    word(key, word_of(v));
  }

  template <Describable T>
  void operator()(std::string_view key, const T& v) {
    begin_nested(key);
    const_cast<T&>(v).fields(*this);
    end_nested();
  }
  template <Describable T>
  void operator()(std::string_view key, const std::vector<T>& v) {
    begin_list(key, v.size());
    for (const auto& item : v) {
      begin_list_item();
      const_cast<T&>(item).fields(*this);
      end_nested();
    }
  }

  void begin_message();
  std::string finish_message();

 private:
  void key(std::string_view k);
  void word(std::string_view k, std::string_view w);
  void begin_nested(std::string_view key);
  void begin_list(std::string_view key, size_t n);
  void begin_list_item();
  void end_nested();
  std::unique_ptr<detail::Packer> p_;
};

class Reader {
 public:
  // Parses one frame: whole-frame check, limits, top level must be a map.
  static Result<Reader> parse(std::string_view frame, const DecodeLimits& limits = {});

  ~Reader();
  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;

  void operator()(std::string_view key, int64_t& v);
  void operator()(std::string_view key, int& v);
  void operator()(std::string_view key, double& v);
  void operator()(std::string_view key, bool& v);
  void operator()(std::string_view key, std::string& v);
  void operator()(std::string_view key, Bytes& v);
  void operator()(std::string_view key, std::vector<std::string>& v);
  void operator()(std::string_view key, std::vector<int64_t>& v);
  void operator()(std::string_view key, std::vector<double>& v);
  void operator()(std::string_view key, std::map<std::string, std::string>& v);
  void operator()(std::string_view key, std::map<std::string, double>& v);
  void operator()(std::string_view key, std::map<std::string, int64_t>& v);
  void operator()(std::string_view key, FileMap& v);

  template <WireEnum E>
  void operator()(std::string_view key, E& v) {
    std::string w;
    if (!word(key, w)) return;
    if (auto e = enum_of<E>(w))
      v = *e;
    else
      unknown_word(key, w, WireWords<E>::kWhat, words_of<E>());
  }
  template <WireEnum E>
  void operator()(std::string_view key, std::optional<E>& v) {
    std::string w;
    if (!word(key, w)) return;
    if (w.empty())
      v.reset();
    else if (auto e = enum_of<E>(w))
      v = *e;
    else
      unknown_word(key, w, WireWords<E>::kWhat, words_of<E>());
  }

  template <Describable T>
  void operator()(std::string_view key, T& v) {
    Reader sub;
    if (!nested(key, sub)) return;
    v.fields(sub);
    absorb(sub);
  }
  template <Describable T>
  void operator()(std::string_view key, std::vector<T>& v) {
    std::vector<Reader> items;
    if (!list(key, items)) return;
    v.clear();
    for (auto& r : items) {
      T item{};
      item.fields(r);
      absorb(r);
      v.push_back(std::move(item));
    }
  }

  bool has(std::string_view key) const;
  int64_t version() const;
  // The first error met while reading fields, with the key path.
  const Status& status() const { return status_; }

 private:
  Reader();
  bool nested(std::string_view key, Reader& out);
  bool list(std::string_view key, std::vector<Reader>& out);
  void absorb(const Reader& sub);
  const void* find(std::string_view key) const;  // const msgpack::object* or nullptr
  void fail(std::string_view key, std::string_view expected);
  // Reads the string at `key` into `out`; false when it is absent (or nil), or not a string (then failed).
  bool word(std::string_view key, std::string& out);
  void unknown_word(std::string_view key, std::string_view word, std::string_view what, std::string_view words);

  std::shared_ptr<void> handle_;  // keeps the unpacked zone alive
  const void* obj_ = nullptr;     // const msgpack::object* of this map
  std::string path_;
  Status status_;
};

template <Describable T>
std::string encode(const T& msg) {
  Writer w;
  w.begin_message();
  const_cast<T&>(msg).fields(w);
  return w.finish_message();
}

template <Describable T>
Result<T> decode(std::string_view frame, const DecodeLimits& limits = {}) {
  auto r = Reader::parse(frame, limits);
  if (!r.is_ok()) return r.status();
  T msg{};
  msg.fields(r.value());
  if (!r->status().is_ok()) return r->status();
  // A message that older writers spelled another way says so with an upgrade(): what they wrote becomes
  // what this version writes, here at the edge, so no reader past decode() knows the old spelling.
  if constexpr (requires { msg.upgrade(); }) msg.upgrade();
  return msg;
}

// Reads one string key of a frame without knowing its schema (e.g. a message's "kind").
Result<std::string> peek_string(std::string_view frame, std::string_view key);

}  // namespace kiln::proto
