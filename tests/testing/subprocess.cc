#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <regex>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace quill::testing {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));

  // Everything the child needs is built before fork (no allocation after it).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    if (env.count(key) == 0) env_strings.push_back(entry);
  }
  for (const auto& [key, value] : env) env_strings.push_back(absl::StrCat(key, "=", value));
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    // The test process may have signals blocked (gRPC threads); the child starts clean.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argp[0], argp.data(), envp.data());
    const char msg[] = "exec failed\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    _exit(127);
  }
  close(fds[1]);
  auto process = std::unique_ptr<Subprocess>(new Subprocess());
  process->pid_ = pid;
  process->out_fd_ = fds[0];
  process->reader_ = std::thread([p = process.get()] { p->ReadLoop(); });
  return process;
}

Subprocess::~Subprocess() {
  bool exited;
  {
    absl::MutexLock lock(&mu_);
    exited = exit_code_.has_value();
  }
  if (!exited) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  if (reader_.joinable()) reader_.join();
  close(out_fd_);
}

void Subprocess::ReadLoop() {
  char buffer[4096];
  while (true) {
    const ssize_t n = read(out_fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    absl::MutexLock lock(&mu_);
    if (n <= 0) {
      eof_ = true;
      return;
    }
    output_.append(buffer, static_cast<size_t>(n));
  }
}

std::string Subprocess::output() const {
  absl::MutexLock lock(&mu_);
  return output_;
}

absl::StatusOr<std::string> Subprocess::WaitForOutput(const std::string& pattern,
                                                      absl::Duration timeout) {
  const std::regex re(pattern);
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  size_t checked = static_cast<size_t>(-1);
  while (true) {
    if (output_.size() != checked) {
      checked = output_.size();
      std::smatch match;
      if (std::regex_search(output_, match, re)) {
        return match.size() > 1 ? match[1].str() : match[0].str();
      }
    }
    if (eof_) {
      return absl::FailedPreconditionError(
          absl::StrCat("process ended without printing /", pattern, "/; output:\n", output_));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no /", pattern, "/ within ", absl::FormatDuration(timeout),
                       "; output:\n", output_));
    }
    // Woken by new output (or eof), or re-checked periodically.
    WaitArg arg{this, checked};
    mu_.AwaitWithTimeout(absl::Condition(&Subprocess::OutputChanged, &arg),
                         absl::Milliseconds(50));
  }
}

bool Subprocess::OutputChanged(WaitArg* arg) {
  return arg->self->output_.size() != arg->size || arg->self->eof_;
}

bool Subprocess::WaitForEof(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&eof_), timeout);
}

void Subprocess::Signal(int signal) { kill(pid_, signal); }

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (exit_code_.has_value()) return *exit_code_;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      absl::MutexLock lock(&mu_);
      exit_code_ = code;
      return code;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " still running after ",
                                                      absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::StatusOr<std::string> RunAndCapture(const std::vector<std::string>& argv, int* exit_code,
                                          absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Start(argv);
  if (!process.ok()) return process.status();
  absl::StatusOr<int> code = (*process)->Wait(timeout);
  if (!code.ok()) return code.status();
  *exit_code = *code;
  // The child has exited; the reader sees eof once the pipe is drained.
  (*process)->WaitForEof(absl::Seconds(5));
  return (*process)->output();
}

}  // namespace quill::testing
