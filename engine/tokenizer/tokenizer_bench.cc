// quill-tokenizer-bench: Encode speed of every vocabulary on a ~107 KB and a ~1 MB prompt.
//
//   quill-tokenizer-bench [--reps 5] [VOCAB.gguf ...]
//
// Without files, benchmarks every *.gguf in $QUILL_SHARED_DIR/vocab (default
// ../shared/vocab). The prompt repeats a block of mixed text (English, accents, CJK,
// emoji, digits, whitespace runs, code), then one 5000-letter word; the 107 KB one is the
// text of tokenizer_test's LongPromptFinishes. Prints the best of --reps runs in wall-clock
// ms and in CPU ms of the encoding thread, and MB/s from the CPU time (1 MB = 10^6 bytes):
// on a shared, loaded machine CPU time is the steadier measure of the work. Uses only
// Tokenizer::FromGguf and Encode, so the same source builds against older trees for
// before/after comparisons.

#include <dirent.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {
namespace {

std::string MakePrompt(size_t min_bytes) {
  const std::string block =
      "In the beginning God created the heaven and the earth. caf\xC3\xA9 \xE6\x88\x91\xE6\x83\xB3 "
      "\xF0\x9F\xA6\x99 12345   \n\t x=y+z; ";
  std::string text;
  while (text.size() < min_bytes) text += block;
  text += std::string(5000, 'a');
  return text;
}

double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

std::vector<std::string> DefaultVocabs() {
  const char* shared = std::getenv("QUILL_SHARED_DIR");
  const std::string dir = std::string(shared != nullptr ? shared : "../shared") + "/vocab";
  std::vector<std::string> paths;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      if (absl::EndsWith(e->d_name, ".gguf")) paths.push_back(dir + "/" + e->d_name);
    }
    closedir(d);
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

int Run(int argc, char** argv) {
  int reps = 5;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &reps) || reps < 1) {
        std::fprintf(stderr, "--reps wants a positive integer\n");
        return 2;
      }
    } else if (absl::StartsWith(arg, "-")) {
      std::fprintf(stderr, "usage: quill-tokenizer-bench [--reps N] [VOCAB.gguf ...]\n");
      return 2;
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.empty()) paths = DefaultVocabs();
  if (paths.empty()) {
    std::fprintf(stderr, "no vocabularies given and none found in $QUILL_SHARED_DIR/vocab\n");
    return 1;
  }
  const std::vector<std::string> prompts = {MakePrompt(100 * 1024), MakePrompt(1000 * 1024)};
  std::printf("%-30s %8s %7s %9s %9s %9s %8s\n", "vocabulary", "bytes", "tokens", "wall ms",
              "cpu ms", "MB/s cpu", "load ms");
  for (const std::string& path : paths) {
    const std::string name = path.substr(path.find_last_of('/') + 1);
    const auto load_start = std::chrono::steady_clock::now();
    auto file = GgufFile::Open(path);
    if (!file.ok()) {
      std::printf("%-30s %s\n", name.c_str(), file.status().ToString().c_str());
      continue;
    }
    auto tokenizer = Tokenizer::FromGguf(**file);
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start)
            .count();
    if (!tokenizer.ok()) {
      std::printf("%-30s unsupported: %s\n", name.c_str(),
                  std::string(tokenizer.status().message()).substr(0, 80).c_str());
      continue;
    }
    for (const std::string& prompt : prompts) {
      double best_ms = 1e300, best_cpu_ms = 1e300;
      size_t tokens = 0;
      for (int r = 0; r < reps; ++r) {
        const auto start = std::chrono::steady_clock::now();
        const double cpu_start = ThreadCpuMs();
        auto ids = (*tokenizer)->Encode(prompt, /*add_special=*/false);
        best_cpu_ms = std::min(best_cpu_ms, ThreadCpuMs() - cpu_start);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        if (!ids.ok()) {
          std::printf("%-30s encode failed: %s\n", name.c_str(), ids.status().ToString().c_str());
          break;
        }
        tokens = ids->size();
        best_ms = std::min(best_ms, ms);
      }
      std::printf("%-30s %8zu %7zu %9.2f %9.2f %9.2f %8.0f\n", name.c_str(), prompt.size(), tokens,
                  best_ms, best_cpu_ms, prompt.size() / 1e3 / best_cpu_ms, load_ms);
    }
  }
  return 0;
}

}  // namespace
}  // namespace quill::engine

int main(int argc, char** argv) { return quill::engine::Run(argc, argv); }
