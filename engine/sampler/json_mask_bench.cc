// quill-json-mask-bench: the cost of JSON mode's mask (JsonConstraint::Mask) per token,
// on real vocabularies, at the states a JSON answer passes through.
//
//   quill-json-mask-bench [--reps 200] [VOCAB.gguf ...]
//
// Without files, benchmarks every *.gguf in $QUILL_SHARED_DIR/vocab (default
// ../shared/vocab). The table is the engine's (every non-control token's bytes) plus one
// token per byte value, by which each state is reached. Prints, per vocabulary, the time
// to build the table, then per state the allowed-token count and the median microseconds
// of one Mask call (wall clock, one thread), in JSON mode and then with a JSON Schema
// (structured output: a schema of typed, enum and nested properties). Uses only
// TokenBytesTable::Make, JsonConstraint and JsonSchema::Compile, so the same source builds
// against older trees (without the schema rows: -DQUILL_BENCH_NO_SCHEMA) for before/after
// runs; equal allowed counts show the builds mask alike.

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/types/span.h"
#include "engine/gguf/gguf_file.h"
#include "engine/sampler/json_constraint.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {
namespace {

using Clock = std::chrono::steady_clock;

struct State {
  const char* name;
  const char* prefix;  // the JSON text written so far
};

#ifndef QUILL_BENCH_NO_SCHEMA
constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "kind": {"enum": ["cat", "dog"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "address": {"anyOf": [{"type": "null"},
                          {"type": "object", "properties": {"city": {"type": "string"}}}]}
  },
  "required": ["name", "age", "kind"],
  "additionalProperties": false
})";

constexpr State kSchemaStates[] = {
    {"after '{'", "{"},
    {"in a key", "{\"na"},
    {"after a colon", "{\"name\":"},
    {"in a string", "{\"name\": \"The quick"},
    {"in an enum", "{\"kind\": \"c"},
    {"in an integer", "{\"age\": 12"},
    {"in an array", "{\"tags\": [\"a\", "},
};
#endif

constexpr State kStates[] = {
    {"start", ""},
    {"after '{'", "{"},
    {"in a key", "{\"na"},
    {"after a colon", "{\"name\":"},
    {"in a string", "{\"name\": \"The quick"},
    {"after a number", "{\"name\": \"x\", \"n\": 12"},
    {"in an array", "{\"a\": [true, "},
    {"complete", "{\"a\": {}}"},
};

std::vector<std::string> VocabFiles(int argc, char** argv) {
  std::vector<std::string> files(argv + 1, argv + argc);
  if (!files.empty()) return files;
  const char* shared = std::getenv("QUILL_SHARED_DIR");
  const std::string dir = std::string(shared != nullptr ? shared : "../shared") + "/vocab";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      if (absl::EndsWith(entry->d_name, ".gguf")) files.push_back(dir + "/" + entry->d_name);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

int Run(int argc, char** argv) {
  int reps = 200;
  std::vector<char*> args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--reps" && i + 1 < argc && absl::SimpleAtoi(argv[i + 1], &reps)) {
      ++i;
    } else {
      args.push_back(argv[i]);
    }
  }
  const std::vector<std::string> files = VocabFiles(static_cast<int>(args.size()), args.data());
  if (files.empty()) {
    std::fprintf(stderr, "no vocabulary files (pass VOCAB.gguf or set QUILL_SHARED_DIR)\n");
    return 1;
  }
  for (const std::string& path : files) {
    auto file = GgufFile::Open(path);
    if (!file.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), file.status().ToString().c_str());
      return 1;
    }
    auto tokenizer = Tokenizer::FromGguf(**file);
    if (!tokenizer.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), tokenizer.status().ToString().c_str());
      return 1;
    }
    const Tokenizer& tok = **tokenizer;
    const int vocab = tok.vocab_size();
    std::vector<std::string> bytes(vocab + 256);
    std::vector<uint8_t> ends(vocab + 256, 0);
    for (int id = 0; id < vocab; ++id) {
      if (!tok.IsControl(id)) bytes[id] = tok.TokenBytes(id);
    }
    for (TokenId id : tok.end_of_generation_ids()) ends[id] = 1;
    for (int b = 0; b < 256; ++b) bytes[vocab + b] = std::string(1, static_cast<char>(b));
    const Clock::time_point build_start = Clock::now();
    const TokenBytesTable table = TokenBytesTable::Make(bytes, ends);
    const double build_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - build_start).count();
    std::printf("%s: %d tokens, table built in %.1f ms\n", path.c_str(), vocab, build_ms);
    std::vector<float> logits(bytes.size());
    std::vector<double> times(reps);
    const auto run = [&](const State& state, JsonConstraint json) {
      for (const char* c = state.prefix; *c != '\0'; ++c) {
        json.Advance(vocab + static_cast<uint8_t>(*c));
      }
      int allowed = 0;
      for (int r = 0; r < reps; ++r) {
        std::fill(logits.begin(), logits.end(), 0.0f);
        const Clock::time_point start = Clock::now();
        allowed = json.Mask(absl::MakeSpan(logits));
        times[r] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      }
      std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
      std::printf("  %-16s allowed %7d  %8.1f us/mask\n", state.name, allowed, times[reps / 2]);
    };
    for (const State& state : kStates) run(state, JsonConstraint(table));
#ifndef QUILL_BENCH_NO_SCHEMA
    auto schema = JsonSchema::Compile(kSchema);
    if (!schema.ok()) {
      std::fprintf(stderr, "schema: %s\n", schema.status().ToString().c_str());
      return 1;
    }
    std::printf("  with a schema:\n");
    for (const State& state : kSchemaStates) run(state, JsonConstraint(table, *schema));
#endif
  }
  return 0;
}

}  // namespace
}  // namespace quill::engine

int main(int argc, char** argv) { return quill::engine::Run(argc, argv); }
