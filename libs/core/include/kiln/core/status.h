// Status and Result<T>: expected failures are values. Each code says what the caller should do.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kiln {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input: give up on this job, tell the user; retrying cannot help
  kNotFound,            // the thing named does not exist
  kAlreadyExists,       // idempotent duplicate
  kUnavailable,         // transient: retry with backoff
  kDeadlineExceeded,    // timed out: retry may help
  kResourceExhausted,   // a limit was hit (size, budget)
  kFailedPrecondition,  // the system is not in a state to do this
  kPermissionDenied,    // not authorized
  kInternal,            // a bug or corrupted state: dead-letter, do not retry blindly
};

std::string_view status_code_name(StatusCode code);

// Whether an operation that failed with `code` is worth retrying as is.
bool is_retryable(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefix context on the way up: "task 'rmsnorm': " + message.
  Status with_context(std::string_view context) const;
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status deadline_exceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status permission_denied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }

  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kiln

// Early return of a failed Status / Result from a function returning Status or Result<U>.
#define KILN_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::kiln::Status kiln_status_ = (expr);           \
    if (!kiln_status_.is_ok()) return kiln_status_; \
  } while (0)

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)
#define KILN_ASSIGN_OR_RETURN(lhs, expr) KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_r_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.is_ok()) return tmp.status();           \
  lhs = std::move(tmp).value()
