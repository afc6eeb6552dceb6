#include "kiln/proto/codec.h"

#include <msgpack.hpp>

#include <exception>

namespace kiln::proto {

namespace detail {

// One map being written: its fields are packed into `buf`; the map header (which needs the count) is
// written when the level closes.
struct Level {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk{buf};
  uint32_t count = 0;
};

class Packer {
 public:
  std::vector<std::unique_ptr<Level>> stack;
  msgpack::packer<msgpack::sbuffer>& pk() { return stack.back()->pk; }
};

}  // namespace detail

namespace {

using msgpack::object;
using msgpack::type::object_type;

const object* as_obj(const void* p) { return static_cast<const object*>(p); }

std::string_view str_of(const object& o) { return {o.via.str.ptr, o.via.str.size}; }

bool as_int(const object& o, int64_t& out) {
  if (o.type == object_type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(INT64_MAX)) return false;
    out = static_cast<int64_t>(o.via.u64);
    return true;
  }
  if (o.type == object_type::NEGATIVE_INTEGER) {
    out = o.via.i64;
    return true;
  }
  return false;
}

bool as_double(const object& o, double& out) {
  if (o.type == object_type::FLOAT64 || o.type == object_type::FLOAT32) {
    out = o.via.f64;
    return true;
  }
  int64_t i = 0;
  if (as_int(o, i)) {
    out = static_cast<double>(i);
    return true;
  }
  return false;
}

bool as_string(const object& o, std::string& out) {
  if (o.type == object_type::STR) {
    out.assign(o.via.str.ptr, o.via.str.size);
    return true;
  }
  if (o.type == object_type::BIN) {  // tolerate bin where str is expected (other-language writers)
    out.assign(o.via.bin.ptr, o.via.bin.size);
    return true;
  }
  return false;
}

template <class V, class F>
bool read_map(const object& o, std::map<std::string, V>& out, F convert) {
  if (o.type != object_type::MAP) return false;
  std::map<std::string, V> m;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (kv.key.type != object_type::STR) return false;
    V value{};
    if (!convert(kv.val, value)) return false;
    m.emplace(std::string(str_of(kv.key)), std::move(value));
  }
  out = std::move(m);
  return true;
}

template <class V, class F>
bool read_array(const object& o, std::vector<V>& out, F convert) {
  if (o.type != object_type::ARRAY) return false;
  std::vector<V> v;
  v.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    V value{};
    if (!convert(o.via.array.ptr[i], value)) return false;
    v.push_back(std::move(value));
  }
  out = std::move(v);
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------- Writer

Writer::Writer() : p_(std::make_unique<detail::Packer>()) {}
Writer::~Writer() = default;

void Writer::begin_message() {
  p_->stack.clear();
  p_->stack.push_back(std::make_unique<detail::Level>());
  (*this)("v", kSchemaVersion);
}

std::string Writer::finish_message() {
  auto& top = *p_->stack.front();
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_map(top.count);
  out.write(top.buf.data(), top.buf.size());
  p_->stack.clear();
  return std::string(out.data(), out.size());
}

void Writer::key(std::string_view k) {
  p_->stack.back()->count++;
  p_->pk().pack_str(static_cast<uint32_t>(k.size()));
  p_->pk().pack_str_body(k.data(), static_cast<uint32_t>(k.size()));
}

void Writer::word(std::string_view k, std::string_view w) {
  key(k);
  p_->pk().pack_str(static_cast<uint32_t>(w.size()));
  p_->pk().pack_str_body(w.data(), static_cast<uint32_t>(w.size()));
}

void Writer::begin_nested(std::string_view k) {
  key(k);
  p_->stack.push_back(std::make_unique<detail::Level>());
}

void Writer::begin_list(std::string_view k, size_t n) {
  key(k);
  p_->pk().pack_array(static_cast<uint32_t>(n));
}

void Writer::begin_list_item() { p_->stack.push_back(std::make_unique<detail::Level>()); }

void Writer::end_nested() {
  auto level = std::move(p_->stack.back());
  p_->stack.pop_back();
  auto& parent = *p_->stack.back();
  parent.pk.pack_map(level->count);
  parent.buf.write(level->buf.data(), level->buf.size());
}

void Writer::operator()(std::string_view k, const int64_t& v) {
  key(k);
  p_->pk().pack_int64(v);
}
void Writer::operator()(std::string_view k, const int& v) {
  key(k);
  p_->pk().pack_int64(v);
}
void Writer::operator()(std::string_view k, const double& v) {
  key(k);
  p_->pk().pack_double(v);
}
void Writer::operator()(std::string_view k, const bool& v) {
  key(k);
  if (v)
    p_->pk().pack_true();
  else
    p_->pk().pack_false();
}
void Writer::operator()(std::string_view k, const std::string& v) {
  key(k);
  p_->pk().pack(v);
}
void Writer::operator()(std::string_view k, const Bytes& v) {
  key(k);
  p_->pk().pack_bin(static_cast<uint32_t>(v.data.size()));
  p_->pk().pack_bin_body(v.data.data(), static_cast<uint32_t>(v.data.size()));
}
void Writer::operator()(std::string_view k, const std::vector<std::string>& v) {
  key(k);
  p_->pk().pack(v);
}
void Writer::operator()(std::string_view k, const std::vector<int64_t>& v) {
  key(k);
  p_->pk().pack(v);
}
void Writer::operator()(std::string_view k, const std::vector<double>& v) {
  key(k);
  p_->pk().pack(v);
}
void Writer::operator()(std::string_view k, const std::map<std::string, std::string>& v) {
  key(k);
  p_->pk().pack(v);
}
void Writer::operator()(std::string_view k, const std::map<std::string, double>& v) {
  key(k);
  p_->pk().pack(v);
}
void Writer::operator()(std::string_view k, const std::map<std::string, int64_t>& v) {
  key(k);
  p_->pk().pack(v);
}
void Writer::operator()(std::string_view k, const FileMap& v) {
  key(k);
  auto& pk = p_->pk();
  pk.pack_map(static_cast<uint32_t>(v.size()));
  for (const auto& [name, content] : v) {
    pk.pack(name);
    pk.pack_bin(static_cast<uint32_t>(content.data.size()));
    pk.pack_bin_body(content.data.data(), static_cast<uint32_t>(content.data.size()));
  }
}

// ---------------------------------------------------------------------------------------------- Reader

Reader::Reader() = default;
Reader::~Reader() = default;
Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;

Result<Reader> Reader::parse(std::string_view frame, const DecodeLimits& limits) {
  if (frame.size() > limits.max_frame_bytes)
    return invalid_argument("message of " + std::to_string(frame.size()) + " bytes exceeds the limit of " +
                            std::to_string(limits.max_frame_bytes));
  if (frame.empty()) return invalid_argument("empty message body");
  auto handle = std::make_shared<msgpack::object_handle>();
  size_t off = 0;
  try {
    msgpack::unpack_limit lim(limits.max_array, limits.max_map, limits.max_str, limits.max_bin, 0, limits.max_depth);
    *handle = msgpack::unpack(frame.data(), frame.size(), off, nullptr, nullptr, lim);
  } catch (const std::exception& e) {
    return invalid_argument(std::string("malformed msgpack: ") + e.what());
  }
  if (off != frame.size())
    return invalid_argument("trailing bytes after message: consumed " + std::to_string(off) + " of " +
                            std::to_string(frame.size()));
  if (handle->get().type != object_type::MAP) return invalid_argument("message body is not a map");
  Reader r;
  r.obj_ = &handle->get();
  r.handle_ = std::move(handle);
  if (r.has("v")) {
    int64_t v = 0;
    r("v", v);
    if (!r.status().is_ok()) return r.status();
    if (v < 1) return invalid_argument("bad schema version " + std::to_string(v));
  } else {
    return invalid_argument("message has no version field 'v'");
  }
  return r;
}

const void* Reader::find(std::string_view key) const {
  const object* o = as_obj(obj_);
  if (o == nullptr || o->type != object_type::MAP) return nullptr;
  for (uint32_t i = 0; i < o->via.map.size; ++i) {
    const auto& kv = o->via.map.ptr[i];
    if (kv.key.type == object_type::STR && str_of(kv.key) == key) return &kv.val;
  }
  return nullptr;
}

bool Reader::has(std::string_view key) const { return find(key) != nullptr; }

int64_t Reader::version() const {
  const object* o = as_obj(find("v"));
  int64_t v = 0;
  if (o && as_int(*o, v)) return v;
  return 0;
}

void Reader::fail(std::string_view key, std::string_view expected) {
  if (!status_.is_ok()) return;
  std::string p = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  status_ = invalid_argument("field '" + p + "': expected " + std::string(expected));
}

bool Reader::word(std::string_view key, std::string& out) {
  const object* o = as_obj(find(key));
  if (o == nullptr || o->type == object_type::NIL) return false;
  if (as_string(*o, out)) return true;
  fail(key, "a string");
  return false;
}

void Reader::unknown_word(std::string_view key, std::string_view word, std::string_view what, std::string_view words) {
  if (!status_.is_ok()) return;
  std::string p = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  status_ = invalid_argument("field '" + p + "': unknown " + std::string(what) + " \"" + std::string(word) +
                             "\" (expected " + std::string(words) + ")");
}

void Reader::absorb(const Reader& sub) {
  if (status_.is_ok() && !sub.status_.is_ok()) status_ = sub.status_;
}

bool Reader::nested(std::string_view key, Reader& out) {
  const object* o = as_obj(find(key));
  if (o == nullptr || o->type == object_type::NIL) return false;
  if (o->type != object_type::MAP) {
    fail(key, "a map");
    return false;
  }
  out.handle_ = handle_;
  out.obj_ = o;
  out.path_ = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  return true;
}

bool Reader::list(std::string_view key, std::vector<Reader>& out) {
  const object* o = as_obj(find(key));
  if (o == nullptr || o->type == object_type::NIL) return false;
  if (o->type != object_type::ARRAY) {
    fail(key, "an array");
    return false;
  }
  std::string base = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  for (uint32_t i = 0; i < o->via.array.size; ++i) {
    const object& item = o->via.array.ptr[i];
    if (item.type != object_type::MAP) {
      fail(key, "an array of maps");
      return false;
    }
    Reader r;
    r.handle_ = handle_;
    r.obj_ = &item;
    r.path_ = base + "[" + std::to_string(i) + "]";
    out.push_back(std::move(r));
  }
  return true;
}

#define KILN_READ_FIELD(TYPE, EXPECTED, CONVERT)             \
  void Reader::operator()(std::string_view key, TYPE& v) {   \
    const object* o = as_obj(find(key));                     \
    if (o == nullptr || o->type == object_type::NIL) return; \
    if (!(CONVERT)) fail(key, EXPECTED);                     \
  }

KILN_READ_FIELD(int64_t, "an integer", as_int(*o, v))
KILN_READ_FIELD(double, "a number", as_double(*o, v))
KILN_READ_FIELD(std::string, "a string", as_string(*o, v))
KILN_READ_FIELD(std::vector<std::string>, "an array of strings", read_array(*o, v, as_string))
KILN_READ_FIELD(std::vector<int64_t>, "an array of integers", read_array(*o, v, as_int))
KILN_READ_FIELD(std::vector<double>, "an array of numbers", read_array(*o, v, as_double))
using StrMap = std::map<std::string, std::string>;
using NumMap = std::map<std::string, double>;
using IntMap = std::map<std::string, int64_t>;
KILN_READ_FIELD(StrMap, "a map of strings", read_map(*o, v, as_string))
KILN_READ_FIELD(NumMap, "a map of numbers", read_map(*o, v, as_double))
KILN_READ_FIELD(IntMap, "a map of integers", read_map(*o, v, as_int))
#undef KILN_READ_FIELD

void Reader::operator()(std::string_view key, int& v) {
  int64_t wide = v;
  const object* o = as_obj(find(key));
  if (o == nullptr || o->type == object_type::NIL) return;
  if (!as_int(*o, wide) || wide < INT32_MIN || wide > INT32_MAX) return fail(key, "a 32-bit integer");
  v = static_cast<int>(wide);
}

void Reader::operator()(std::string_view key, bool& v) {
  const object* o = as_obj(find(key));
  if (o == nullptr || o->type == object_type::NIL) return;
  if (o->type != object_type::BOOLEAN) return fail(key, "a boolean");
  v = o->via.boolean;
}

void Reader::operator()(std::string_view key, Bytes& v) {
  const object* o = as_obj(find(key));
  if (o == nullptr || o->type == object_type::NIL) return;
  if (!as_string(*o, v.data)) fail(key, "bytes");
}

void Reader::operator()(std::string_view key, FileMap& v) {
  const object* o = as_obj(find(key));
  if (o == nullptr || o->type == object_type::NIL) return;
  auto conv = [](const object& x, Bytes& b) { return as_string(x, b.data); };
  if (!read_map(*o, v, conv)) fail(key, "a map of file name to bytes");
}

Result<std::string> peek_string(std::string_view frame, std::string_view key) {
  auto r = Reader::parse(frame);
  if (!r.is_ok()) return r.status();
  std::string out;
  (*r)(key, out);
  if (!r->status().is_ok()) return r->status();
  if (!r->has(key)) return invalid_argument("message has no '" + std::string(key) + "'");
  return out;
}

}  // namespace kiln::proto
