// Runs only in a QUILL_SANITIZE=thread build, where ctest expects it to FAIL: two threads
// write one int with nothing ordering them, and TSan must say so (exit code 66). If this
// ever passes, the TSan stage is not detecting races and its green result means nothing.

#include <cstdio>
#include <thread>

namespace {
int shared_value = 0;
}  // namespace

int main() {
  std::thread a([] { shared_value = 1; });
  std::thread b([] { shared_value = 2; });
  a.join();
  b.join();
  std::printf("shared_value=%d (TSan should have reported a race)\n", shared_value);
  return 0;
}
