// Errors are values inside the library; only main() turns them into exit codes.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace bpfdiag {

struct Error {
  std::string message;  // one line, no trailing newline, no tool prefix
};

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT(implicit)
  Result(Error err) : v_(std::move(err)) {}            // NOLINT(implicit)
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const T& value() const { return std::get<T>(v_); }
  T& value() { return std::get<T>(v_); }
  const T& operator*() const { return value(); }
  const T* operator->() const { return &value(); }
  const std::string& error() const { return std::get<Error>(v_).message; }

 private:
  std::variant<T, Error> v_;
};

// For operations that only succeed or fail.
using Status = std::optional<Error>;  // nullopt = success

}  // namespace bpfdiag
