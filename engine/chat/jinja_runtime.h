#pragma once

// Per-render state shared by the interpreter and the builtins (filters, tests, methods,
// globals): the heap, the resource budgets, the date strftime_now sees, and helpers that
// build values while charging the budgets. Templates are user-supplied, so every loop
// iteration, call, evaluation step and allocation is counted and bounded.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/civil_time.h"
#include "engine/chat/jinja_value.h"

namespace quill::engine::chat::jinja {

struct RenderLimits {
  // The rendered text, and any single string or list built while rendering.
  int64_t max_output_bytes = int64_t{16} << 20;
  // Every string, list and dict built during one render, added up (bounds memory even
  // when a template builds and drops many large values).
  int64_t max_allocated_bytes = int64_t{256} << 20;
  // Expression evaluations, statements, loop iterations, calls and elements visited by
  // filters, added up (bounds time).
  int64_t max_operations = 20'000'000;
  // Nesting of evaluation: expressions, statements and macro calls (bounds the C++ stack).
  int max_depth = 400;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

// Binds Python-style call arguments to `params` in order; optional parameters that were
// not passed stay nullopt. TypeError (naming `function`) for too many positional
// arguments, an unknown or repeated keyword, or a missing required one (the first
// `required` params are required).
absl::StatusOr<std::vector<std::optional<Value>>> BindArgs(
    absl::string_view function, const CallArgs& args,
    std::initializer_list<absl::string_view> params, size_t required = 0);

class Runtime {
 public:
  Runtime(const RenderLimits& limits, absl::CivilSecond now) : limits_(limits), now_(now) {}

  Heap& heap() { return heap_; }
  const RenderLimits& limits() const { return limits_; }
  absl::CivilSecond now() const { return now_; }

  // Counts `n` operations against max_operations.
  absl::Status Tick(int64_t n = 1) {
    operations_ += n;
    if (operations_ > limits_.max_operations) return OperationsExceeded();
    // Heap objects are small and made one or two per operation; checked here, cheaply.
    if (allocated_ + heap_.bytes() > limits_.max_allocated_bytes) return AllocationExceeded(0);
    return absl::OkStatus();
  }
  // Charges a value of `bytes` against the per-value and cumulative byte limits.
  absl::Status Charge(int64_t bytes) {
    allocated_ += bytes;
    if (bytes > limits_.max_output_bytes ||
        allocated_ + heap_.bytes() > limits_.max_allocated_bytes) {
      return AllocationExceeded(bytes);
    }
    return absl::OkStatus();
  }
  int64_t operations() const { return operations_; }

  // Depth of nested evaluation; Enter() fails beyond max_depth. Pair with Leave().
  absl::Status Enter() {
    if (++depth_ > limits_.max_depth) {
      --depth_;
      return DepthExceeded();
    }
    return absl::OkStatus();
  }
  void Leave() { --depth_; }

  // Values that charge the budgets.
  absl::StatusOr<Value> NewString(StrPtr s);
  absl::StatusOr<Value> NewList(ListKind kind, std::vector<Value> items);
  absl::StatusOr<Value> NewDict(std::vector<std::pair<Value, Value>> entries);

  // Undefined values with Jinja2's messages for when they are used.
  Value Undefined(std::string message, bool security = false);
  Value UndefinedName(absl::string_view name);  // "'name' is undefined"
  // "'dict object' has no attribute 'x'".
  Value UndefinedAttribute(const Value& owner, absl::string_view name);
  // "'dict object' has no attribute 'x'" for a string key, "list object has no element 5"
  // otherwise.
  Value UndefinedItem(const Value& owner, const Value& key);
  // The error raised when `v` (undefined) is used: UndefinedError or SecurityError.
  absl::Status UndefinedError(const Value& v) const;

 private:
  absl::Status OperationsExceeded() const;
  absl::Status AllocationExceeded(int64_t bytes) const;
  absl::Status DepthExceeded() const;

  Heap heap_;
  const RenderLimits limits_;
  const absl::CivilSecond now_;
  int64_t operations_ = 0;
  int64_t allocated_ = 0;
  int depth_ = 0;
};

// RAII Enter()/Leave().
class DepthGuard {
 public:
  explicit DepthGuard(Runtime& rt) : rt_(rt), status_(rt.Enter()) {}
  ~DepthGuard() {
    if (status_.ok()) rt_.Leave();
  }
  const absl::Status& status() const { return status_; }

 private:
  Runtime& rt_;
  absl::Status status_;
};

}  // namespace quill::engine::chat::jinja
