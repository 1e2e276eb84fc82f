#pragma once

// Runs a child process with its stdout and stderr captured (merged), for tests that start
// a real binary (quill-server, quill-run) and read its output.

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace quill::testing {

class Subprocess {
 public:
  // Starts `argv[0]` (a path) with `argv`, the current environment plus `env` overrides.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});
  // Kills (SIGKILL) and reaps the child if it is still running.
  ~Subprocess();

  pid_t pid() const { return pid_; }

  // Waits until the output so far matches `pattern` (RE2-free: std::regex ECMAScript,
  // searched over the whole output) and returns the first capture group (or the whole
  // match). DEADLINE_EXCEEDED after `timeout`, FAILED_PRECONDITION if the child exits first.
  absl::StatusOr<std::string> WaitForOutput(const std::string& pattern, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::string output() const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until the child's output pipe is closed (it exited) and fully read.
  bool WaitForEof(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // Sends `signal` to the child.
  void Signal(int signal);
  // Waits for the child to exit; returns its exit code (128 + signal if killed), or
  // DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct WaitArg {
    Subprocess* self;
    size_t size;
  };
  Subprocess() = default;
  void ReadLoop();
  // Called by absl::Mutex::Await with mu_ held, which the analysis cannot see.
  static bool OutputChanged(WaitArg* arg) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::thread reader_;
  mutable absl::Mutex mu_;
  std::string output_ ABSL_GUARDED_BY(mu_);
  bool eof_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<int> exit_code_ ABSL_GUARDED_BY(mu_);
};

// Runs `argv` to completion (with a timeout) and returns its captured output; the exit
// code goes to `*exit_code`.
absl::StatusOr<std::string> RunAndCapture(const std::vector<std::string>& argv, int* exit_code,
                                          absl::Duration timeout = absl::Seconds(60));

}  // namespace quill::testing
