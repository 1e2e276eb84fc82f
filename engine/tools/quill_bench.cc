// quill-bench: prompt-processing and generation throughput, in the style of llama-bench.
//
//   OMP_NUM_THREADS=2 quill-bench -m a.gguf,b.gguf [--threads 2] [--reps 3]
//   quill-bench -m a.gguf --batch-decode 1,4,16,64
//
// pp<N>: one Forward() over N prompt tokens (tokens/s). tg<N>: N single-token Forward()
// steps after a 4-token prompt (tg<N> @ d<D>: after a D-token prompt, to see decode at
// depth; a "depth ratio" line after the table divides its rate by tg<N>'s). bd<B>: B
// sequences decoding together, one batched Forward() per step (aggregate tokens/s). Before
// the models, the machine's read bandwidth is measured with the same thread count; each tg
// row shows the bytes it moves (weights + the KV it reads) per second and their fraction of
// that bandwidth (with --interleave, of the bandwidth read between the same repetition's
// steps). Each bd row shows its step time against the first bd row's and its matmul rate
// against the CPU's peak rate of the kernels' dot-product instruction: a step that reads the
// weights once is bandwidth-bound while that share stays low.

#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/base/cpu_features.h"
#include "engine/base/status_macros.h"
#include "engine/gguf/gguf_file.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/tools/compute_peak.h"
#include "engine/tools/read_bandwidth.h"
#include "engine/tools/tool_flags.h"

ABSL_FLAG(std::vector<std::string>, model, {}, "GGUF model(s), comma-separated (alias -m).");
ABSL_FLAG(std::string, pp, "512", "Prompt-processing sizes, comma-separated (0 = skip).");
ABSL_FLAG(std::string, tg, "128", "Generation lengths, comma-separated (0 = skip).");
ABSL_FLAG(std::string, depth, "0",
          "Context depths for the tg tests, comma-separated: each tg test runs after a prompt "
          "of that many tokens (0 = the usual 4-token prompt), e.g. 0,2048,4096.");
ABSL_FLAG(int, bandwidth_mib, 1024,
          "Buffer for the read-bandwidth measurement in MiB (0 = skip it); several times the "
          "last-level cache so that it measures memory.");
ABSL_FLAG(std::string, batch_decode, "",
          "Batched-decode mode: numbers of sequences decoding together, e.g. 1,4,16,64. "
          "Replaces the pp/tg tests.");
ABSL_FLAG(int, bd_steps, 32, "Decode steps per repetition in --batch-decode mode.");
ABSL_FLAG(int, bd_prompt, 16, "Prompt tokens per sequence in --batch-decode mode.");
ABSL_FLAG(int, reps, 3, "Repetitions per test (after one warm-up run).");
ABSL_FLAG(int, threads, 0, "OpenMP threads (alias -t); 0 = $OMP_NUM_THREADS, else 2.");
ABSL_FLAG(bool, exact, false, "Benchmark the exact (f32) kernels instead of the fast ones.");
ABSL_FLAG(std::string, kv, "",
          "KV cache elements for the tg tests, comma-separated: f32, f16, q8 (default: the "
          "mode's own, f32 exact and f16 fast).");
ABSL_FLAG(bool, interleave, false,
          "Run the tests of every model together after loading all models, so that the host's "
          "speed drifting hits all of them alike (their ratios hold on a shared machine): the "
          "pp tests one repetition of each in turn, then the tg tests (every depth and KV "
          "element) one decode step of each in turn. Their RSS column is then the whole "
          "process's.");
ABSL_FLAG(bool, profile, false, "Print a per-phase time breakdown of each test to stderr.");
ABSL_FLAG(bool, trace_steps, false,
          "Print every decode step's latency (ms) to stderr (tg and batch-decode tests).");

namespace quill::engine {
namespace {

using tools::DotKind;
using tools::DotKindName;

// The instruction the model's matmul kernels are built on (compute_peak.h).
DotKind DotKindOf(const Model& model, bool exact) {
  const std::string type = model.weight_type_name();
  if (exact || type == "F32") return DotKind::kF32Fma;
  if (type == "BF16" || type == "F16") {
    return HasAvx512Bf16() ? DotKind::kBf16Dot : DotKind::kF32Fma;
  }
  return DotKind::kInt8Dot;
}

constexpr int kUsage = 2;
constexpr int kLoadError = 3;

struct Stats {
  double mean = 0;
  double stddev = 0;
};

Stats Summarize(const std::vector<double>& v) {
  Stats s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= v.size();
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / (v.size() - 1));
  }
  return s;
}

std::vector<int> ParseSizes(const std::string& text, bool* ok) {
  std::vector<int> out;
  *ok = text.empty() || tools::ParseIdList(text, &out);
  for (int v : out) *ok = *ok && v >= 0;
  out.erase(std::remove(out.begin(), out.end(), 0), out.end());
  return out;
}

// A field of /proc/self/status ("VmRSS", "VmHWM") in bytes; -1 if unreadable.
int64_t ProcStatusBytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = absl::StrCat(field, ":");
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size())) * 1024;
  }
  return -1;
}

// Starts a new peak-RSS (VmHWM) measurement (Linux >= 4.0; ignored elsewhere).
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

double MiB(int64_t bytes) { return bytes / 1048576.0; }

TokenId Argmax(const float* x, int64_t n) {
  return static_cast<TokenId>(std::max_element(x, x + n) - x);
}

// --kv's elements; false if one is not an element's name.
bool ParseKvElements(const std::string& text, std::vector<kernels::KvElement>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    kernels::KvElement element;
    if (!kernels::KvElementFromName({part.data(), part.size()}, &element)) return false;
    out->push_back(element);
  }
  return true;
}

class Bench;

// One tg test: `n` decode steps of a model after a prompt of `prompt_len` tokens, with a KV
// element; and what its table row prints.
struct TgCase {
  Bench* bench;
  int n;
  int prompt_len;
  kernels::KvElement element;
  std::string row;          // the row's columns before the test's name
  std::string test;         // e.g. "tg128 @ d4096"
  double bytes_per_token;   // packed weights + the KV a step reads (mean over the test)
  const std::string* path;  // the model file, for error messages
  int depth;                // the --depth it stands for (its prompt is at least 4 tokens)
};

// One pp test: a model's forward pass over an `n`-token prompt; and what its row prints.
struct PpCase {
  Bench* bench;
  int n;
  std::string row;  // the row's columns before the test's name
  const std::string* path;
};

class Bench {
 public:
  Bench(Model& model, int reps, bool profile) : model_(model), reps_(reps), profile_(profile) {
    vocab_ = model.config().vocab_size;
    std::mt19937 rng(1234);
    std::uniform_int_distribution<TokenId> dist(3, static_cast<TokenId>(vocab_ - 1));
    random_tokens_.resize(4096);  // longer prompts repeat them
    for (TokenId& t : random_tokens_) t = dist(rng);
    const TokenId bos = model.tokenizer().bos_id();
    if (bos >= 0) random_tokens_[0] = bos;
  }

  // Leaves a test's untimed set-up out of --profile, which then describes exactly the
  // steps its tokens/s figure timed.
  class UntimedSection {
   public:
    explicit UntimedSection(Model& model) : model_(model) { model_.PauseProfiling(true); }
    ~UntimedSection() { model_.PauseProfiling(false); }
    UntimedSection(const UntimedSection&) = delete;
    UntimedSection& operator=(const UntimedSection&) = delete;

   private:
    Model& model_;
  };

  // tokens/s of each repetition of `body` (one warm-up first). `body` returns the tokens
  // processed and the seconds they took.
  absl::StatusOr<std::vector<double>> Repeat(
      const std::function<absl::StatusOr<std::pair<int64_t, double>>()>& body,
      const std::string& name) {
    std::vector<double> rates;
    for (int r = -1; r < reps_; ++r) {
      if (r == 0 && profile_) model_.SetProfiling(true);
      auto res = body();
      if (!res.ok()) return res.status();
      if (r >= 0) rates.push_back(res->first / res->second);
    }
    // While the test's KV cache still exists: weights + cache + scratch.
    last_rss_ = ProcStatusBytes("VmRSS");
    if (profile_) {
      std::fprintf(stderr, "%s: %s", name.c_str(), model_.profile().Summary().c_str());
      model_.SetProfiling(false);
    }
    return rates;
  }

  int64_t last_rss() const { return last_rss_; }
  int64_t vocab() const { return vocab_; }

  absl::StatusOr<std::unique_ptr<KvCache>> MakeCache(int64_t tokens) {
    return MakeCache(tokens, model_.kv_element());
  }
  absl::StatusOr<std::unique_ptr<KvCache>> MakeCache(int64_t tokens, kernels::KvElement element) {
    KvCacheOptions o = model_.MakeKvCacheOptions(0, 16);
    o.element = element;
    o.budget_bytes = o.BudgetForTokens(tokens);
    return KvCache::Create(o);
  }

  // A pp<n> test's prompt and cache, timed one repetition at a time.
  class PromptTest {
   public:
    PromptTest(Model& model, std::unique_ptr<KvCache> cache, std::vector<TokenId> prompt)
        : model_(model), cache_(std::move(cache)), prompt_(std::move(prompt)) {
      logits_.resize(model.config().vocab_size);
    }

    // Seconds of one forward pass over the whole prompt.
    absl::StatusOr<double> Run() {
      cache_->Release(0);
      QUILL_RETURN_IF_ERROR(cache_->Reserve(0, static_cast<int64_t>(prompt_.size())));
      BatchEntry e{0, prompt_, 0, true};
      const auto t0 = std::chrono::steady_clock::now();
      QUILL_RETURN_IF_ERROR(model_.Forward({&e, 1}, *cache_, logits_.data()));
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

   private:
    Model& model_;
    std::unique_ptr<KvCache> cache_;
    std::vector<TokenId> prompt_;
    std::vector<float> logits_;
  };

  absl::StatusOr<std::unique_ptr<PromptTest>> MakePromptTest(int n) {
    QUILL_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, MakeCache(n));
    std::vector<TokenId> prompt(n);
    for (int i = 0; i < n; ++i) prompt[i] = random_tokens_[i % random_tokens_.size()];
    return std::make_unique<PromptTest>(model_, std::move(cache), std::move(prompt));
  }

  absl::StatusOr<std::vector<double>> PromptProcessing(int n) {
    QUILL_ASSIGN_OR_RETURN(std::unique_ptr<PromptTest> test, MakePromptTest(n));
    return Repeat(
        [&]() -> absl::StatusOr<std::pair<int64_t, double>> {
          QUILL_ASSIGN_OR_RETURN(const double seconds, test->Run());
          return std::make_pair(int64_t{n}, seconds);
        },
        absl::StrCat("pp", n));
  }

  // Resets `history` to a prompt of `prompt_len` tokens and prefills it (in chunks of the
  // model's max_batch_tokens, untimed) into `cache`, which gets room for `n` more tokens.
  absl::Status Prefill(int prompt_len, int n, KvCache& cache, std::vector<TokenId>& history,
                       std::vector<float>& logits) {
    UntimedSection untimed(model_);
    cache.Release(0);
    QUILL_RETURN_IF_ERROR(cache.Reserve(0, prompt_len + n));
    history.clear();
    for (int i = 0; i < prompt_len; ++i) history.push_back(random_tokens_[i % random_tokens_.size()]);
    const int chunk = model_.options().max_batch_tokens;
    for (int first = 0; first < prompt_len; first += chunk) {
      const int len = std::min(chunk, prompt_len - first);
      BatchEntry e{0, absl::MakeConstSpan(history).subspan(first, len), first, true};
      QUILL_RETURN_IF_ERROR(model_.Forward({&e, 1}, cache, logits.data()));
    }
    return absl::OkStatus();
  }

  // Appends the greedy token and runs its decode step.
  absl::Status DecodeStep(KvCache& cache, std::vector<TokenId>& history,
                          std::vector<float>& logits) {
    history.push_back(Argmax(logits.data(), vocab_));
    BatchEntry d{0, absl::MakeConstSpan(&history.back(), 1),
                 static_cast<int32_t>(history.size() - 1), true};
    return model_.Forward({&d, 1}, cache, logits.data());
  }

  // --trace_steps: prints the milliseconds since `last` (one line per repetition) and
  // returns now.
  static std::chrono::steady_clock::time_point TraceStep(std::chrono::steady_clock::time_point last,
                                                         bool last_step) {
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "%.1f%c", std::chrono::duration<double>(now - last).count() * 1e3,
                 last_step ? '\n' : ' ');
    return now;
  }

  // `n` decode steps after a prompt of `prompt_len` tokens (prefilled untimed).
  absl::StatusOr<std::vector<double>> Generation(int n, int prompt_len,
                                                 kernels::KvElement element) {
    QUILL_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, MakeCache(prompt_len + n, element));
    std::vector<float> logits(vocab_);
    std::vector<TokenId> history;
    history.reserve(prompt_len + n);
    return Repeat(
        [&]() -> absl::StatusOr<std::pair<int64_t, double>> {
          QUILL_RETURN_IF_ERROR(Prefill(prompt_len, n, *cache, history, logits));
          auto t0 = std::chrono::steady_clock::now();
          auto last = t0;
          for (int i = 0; i < n; ++i) {
            QUILL_RETURN_IF_ERROR(DecodeStep(*cache, history, logits));
            if (trace_) last = TraceStep(last, i + 1 == n);
          }
          double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          return std::make_pair(int64_t{n}, s);
        },
        absl::StrCat("tg", n));
  }

  absl::StatusOr<std::vector<double>> BatchDecode(int num_seqs, int prompt_len, int steps) {
    QUILL_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                           MakeCache(int64_t{num_seqs} * (prompt_len + steps + 16)));
    std::vector<float> logits(static_cast<size_t>(vocab_) * num_seqs);
    std::vector<std::vector<TokenId>> hist(num_seqs);
    std::vector<BatchEntry> entries(num_seqs);
    const int max_tokens = model_.options().max_batch_tokens;
    return Repeat(
        [&]() -> absl::StatusOr<std::pair<int64_t, double>> {
          {
            // Prefill every sequence (untimed), as many per Forward() as fit.
            UntimedSection untimed(model_);
            for (int s = 0; s < num_seqs; ++s) {
              cache->Release(s);
              QUILL_RETURN_IF_ERROR(cache->Reserve(s, prompt_len + steps));
              hist[s].assign(random_tokens_.begin() + s, random_tokens_.begin() + s + prompt_len);
              hist[s].reserve(prompt_len + steps);
            }
            const int per_step = std::max(1, max_tokens / prompt_len);
            for (int s0 = 0; s0 < num_seqs; s0 += per_step) {
              const int n = std::min(per_step, num_seqs - s0);
              for (int i = 0; i < n; ++i) entries[i] = BatchEntry{s0 + i, hist[s0 + i], 0, true};
              QUILL_RETURN_IF_ERROR(
                  model_.Forward(absl::MakeConstSpan(entries.data(), n), *cache,
                                 logits.data() + static_cast<size_t>(s0) * vocab_));
            }
          }
          auto t0 = std::chrono::steady_clock::now();
          auto last = t0;
          for (int step = 0; step < steps; ++step) {
            for (int s = 0; s < num_seqs; ++s) {
              hist[s].push_back(Argmax(logits.data() + static_cast<size_t>(s) * vocab_, vocab_));
              entries[s] = BatchEntry{s, absl::MakeConstSpan(&hist[s].back(), 1),
                                      static_cast<int32_t>(hist[s].size() - 1), true};
            }
            QUILL_RETURN_IF_ERROR(model_.Forward(entries, *cache, logits.data()));
            if (trace_) last = TraceStep(last, step + 1 == steps);
          }
          double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          return std::make_pair(int64_t{num_seqs} * steps, secs);
        },
        absl::StrCat("bd", num_seqs));
  }

 private:
  Model& model_;
  int reps_;
  bool profile_;
  bool trace_ = absl::GetFlag(FLAGS_trace_steps);
  int64_t vocab_ = 0;
  int64_t last_rss_ = -1;
  std::vector<TokenId> random_tokens_;
};

struct InterleavedRates {
  std::vector<std::vector<double>> rates;  // per case, tokens/s of each repetition
  std::vector<double> read_bandwidth;      // bytes/s of the probe in each repetition
};

// The decode steps of every case, one step of each in turn (each case leading a round in
// turn) after all are prefilled (untimed), so that the host's speed drifting hits all
// alike: the tokens/s of every repetition (one warm-up first), per case. The cases may
// come from several models. With a `probe`, one slice of it is read after each round of
// steps, which measures the read bandwidth in the same moments.
absl::StatusOr<InterleavedRates> InterleavedGeneration(const std::vector<TgCase>& cases, int reps,
                                                       tools::ReadBandwidthProbe* probe) {
  struct Stream {
    std::unique_ptr<KvCache> cache;
    std::vector<TokenId> history;
    std::vector<float> logits;
    double seconds = 0;
  };
  std::vector<Stream> streams(cases.size());
  int steps = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const TgCase& tc = cases[c];
    QUILL_ASSIGN_OR_RETURN(streams[c].cache, tc.bench->MakeCache(tc.prompt_len + tc.n, tc.element));
    streams[c].logits.resize(tc.bench->vocab());
    streams[c].history.reserve(tc.prompt_len + tc.n);
    steps = std::max(steps, tc.n);
  }
  InterleavedRates result;
  result.rates.resize(cases.size());
  for (int r = -1; r < reps; ++r) {
    double probe_seconds = 0;
    for (size_t c = 0; c < cases.size(); ++c) {
      Stream& st = streams[c];
      QUILL_RETURN_IF_ERROR(cases[c].bench->Prefill(cases[c].prompt_len, cases[c].n, *st.cache,
                                                    st.history, st.logits));
      st.seconds = 0;
    }
    for (int i = 0; i < steps; ++i) {
      // Each case leads a round in turn: with a fixed order, the last case's steps ran
      // 5-12% faster than the others' (one model loaded three times, AMD EPYC Zen 5).
      for (size_t j = 0; j < cases.size(); ++j) {
        const size_t c = (i + j) % cases.size();
        if (i >= cases[c].n) continue;
        Stream& st = streams[c];
        const auto t0 = std::chrono::steady_clock::now();
        QUILL_RETURN_IF_ERROR(cases[c].bench->DecodeStep(*st.cache, st.history, st.logits));
        st.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      if (probe != nullptr) probe_seconds += probe->Read();
    }
    if (r < 0) continue;
    for (size_t c = 0; c < cases.size(); ++c) {
      result.rates[c].push_back(cases[c].n / streams[c].seconds);
    }
    if (probe != nullptr && probe_seconds > 0) {
      result.read_bandwidth.push_back(static_cast<double>(steps) * probe->slice() / probe_seconds);
    }
  }
  return result;
}

// The pp tests of every case, one repetition of each in turn (each case leading a round in
// turn, one warm-up round first), for the same reason as InterleavedGeneration: the
// tokens/s of every repetition, per case.
absl::StatusOr<std::vector<std::vector<double>>> InterleavedPromptProcessing(
    const std::vector<PpCase>& cases, int reps) {
  std::vector<std::unique_ptr<Bench::PromptTest>> tests;
  for (const PpCase& pc : cases) {
    QUILL_ASSIGN_OR_RETURN(std::unique_ptr<Bench::PromptTest> test, pc.bench->MakePromptTest(pc.n));
    tests.push_back(std::move(test));
  }
  std::vector<std::vector<double>> rates(cases.size());
  for (int r = -1; r < reps; ++r) {
    for (size_t j = 0; j < cases.size(); ++j) {
      const size_t c = (r + 1 + j) % cases.size();
      QUILL_ASSIGN_OR_RETURN(const double seconds, tests[c]->Run());
      if (r >= 0) rates[c].push_back(cases[c].n / seconds);
    }
  }
  return rates;
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string HumanParams(int64_t p) {
  if (p >= 1000000000) return absl::StrFormat("%.2f B", p / 1e9);
  if (p >= 1000000) return absl::StrFormat("%.2f M", p / 1e6);
  return absl::StrFormat("%.2f K", p / 1e3);
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "measures prompt-processing (pp) and generation (tg) throughput, like llama-bench.\n"
      "\n"
      "  quill-bench -m MODEL.gguf[,MODEL2.gguf] [--pp 512] [--tg 128] [--reps 3] [--threads 2]\n"
      "  quill-bench -m MODEL.gguf --pp 2048 --tg 128 --depth 0,2048,4096\n"
      "  quill-bench -m MODEL.gguf --batch-decode 1,4,16,64 [--bd-steps 32]\n"
      "\n"
      "Prints one markdown table row per model and test: t/s is the mean +- stddev over the\n"
      "repetitions; a tg row's \"decode reads\" are the bytes it moves per second (packed\n"
      "weights + the KV it reads, per token) and their share of the read bandwidth measured\n"
      "first with the same thread count (with --interleave: measured between the steps of\n"
      "each repetition, so that the host's drift hits both alike). A bd row's column shows\n"
      "its step time, the ratio to the first bd row's, and the matmul operations per second\n"
      "(2 x the weights' multiply-adds x rows / step) as a share of the CPU's peak rate of\n"
      "the kernels' dot instruction (int8 dot, bf16 dot or f32 FMA), measured once with the\n"
      "same thread count. Short aliases: -m --model, -t "
      "--threads, -r --reps, -h "
      "--help.");
  tools::ShowToolFlagsInHelp();
  std::vector<std::string> args = tools::NormalizeArgs(
      argc, argv, {{"m", "model"}, {"t", "threads"}, {"r", "reps"}, {"h", "help"}});
  if (std::string bad = tools::FirstUnknownFlag(args); !bad.empty()) {
    std::fprintf(stderr, "quill-bench: unknown flag %s (see --help)\n", bad.c_str());
    return kUsage;
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());
  std::vector<std::string> models = absl::GetFlag(FLAGS_model);
  for (size_t i = 1; i < positional.size(); ++i) models.push_back(positional[i]);
  if (models.empty()) {
    std::fprintf(stderr, "quill-bench: no model given (use -m MODEL.gguf; see --help)\n");
    return kUsage;
  }
  bool ok_pp, ok_tg, ok_bd, ok_depth;
  const std::vector<int> pp = ParseSizes(absl::GetFlag(FLAGS_pp), &ok_pp);
  const std::vector<int> tg = ParseSizes(absl::GetFlag(FLAGS_tg), &ok_tg);
  const std::vector<int> bd = ParseSizes(absl::GetFlag(FLAGS_batch_decode), &ok_bd);
  std::vector<int> depths = ParseSizes(absl::GetFlag(FLAGS_depth), &ok_depth);
  // ParseSizes drops zeros; depth 0 is a test of its own (the usual short prompt).
  if (absl::StrContains(absl::StrCat(",", absl::GetFlag(FLAGS_depth), ","), ",0,") ||
      absl::GetFlag(FLAGS_depth).empty()) {
    depths.insert(depths.begin(), 0);
  }
  const int bandwidth_mib = absl::GetFlag(FLAGS_bandwidth_mib);
  const int reps = absl::GetFlag(FLAGS_reps);
  const int bd_steps = absl::GetFlag(FLAGS_bd_steps);
  const int bd_prompt = absl::GetFlag(FLAGS_bd_prompt);
  if (!ok_pp || !ok_tg || !ok_bd || !ok_depth || reps < 1 || bd_steps < 1 || bd_prompt < 1 ||
      bandwidth_mib < 0) {
    std::fprintf(stderr,
                 "quill-bench: --pp/--tg/--batch-decode/--depth take comma-separated non-negative "
                 "integers; --reps, --bd-steps, --bd-prompt must be >= 1, --bandwidth-mib >= 0\n");
    return kUsage;
  }
  std::vector<kernels::KvElement> kv_elements;
  if (!ParseKvElements(absl::GetFlag(FLAGS_kv), &kv_elements)) {
    std::fprintf(stderr,
                 "quill-bench: --kv takes f32, f16, bf16 and q8 (comma-separated), not \"%s\"\n",
                 absl::GetFlag(FLAGS_kv).c_str());
    return kUsage;
  }
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads > 0) {
    omp_set_num_threads(threads);
  } else if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    omp_set_num_threads(2);
  }
  threads = omp_get_max_threads();
  const bool exact = absl::GetFlag(FLAGS_exact);

  int max_tokens = 1;
  for (int n : pp) max_tokens = std::max(max_tokens, n);
  for (int n : bd) max_tokens = std::max(max_tokens, n);
  max_tokens = std::max(max_tokens, 4);
  if (!bd.empty()) max_tokens = std::max(max_tokens, bd_prompt);

  // Measured before any model is loaded, so that its buffer is not counted in their RSS.
  const double read_bandwidth =
      bandwidth_mib > 0 ? tools::MeasureReadBandwidth(int64_t{bandwidth_mib} << 20, 5) : 0;
  if (read_bandwidth > 0) {
    std::printf("read bandwidth: %.1f GB/s (%d threads, best of 5 over %d MiB)\n\n",
                read_bandwidth / 1e9, threads, bandwidth_mib);
  }
  // Each dot instruction's peak, measured when a bd test first needs it (stderr, so that
  // the table stays whole).
  std::array<double, 3> peaks = {-1, -1, -1};
  auto compute_peak = [&](DotKind dot) {
    double& peak = peaks[static_cast<int>(dot)];
    if (peak < 0) {
      peak = tools::MeasureComputePeak(dot);
      std::fprintf(stderr, "quill-bench: %s peak: %.0f GOP/s (%d threads, best of 5)\n",
                   DotKindName(dot), peak / 1e9, threads);
    }
    return peak;
  };
  std::printf(
      "| model | type | size | params | mode | threads | test | t/s | RSS | decode reads / step "
      "|\n");
  std::printf("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  std::fflush(stdout);
  int rc = 0;
  const bool interleave = absl::GetFlag(FLAGS_interleave);
  // Interleaved pp and tg tests run after every model is loaded, across all of them.
  std::vector<std::unique_ptr<Model>> kept_models;
  std::vector<std::unique_ptr<Bench>> kept_benches;
  std::vector<PpCase> interleaved_pp;
  std::vector<TgCase> interleaved;
  // A pp row (no decode reads) or a bd row (`last_column`: its step).
  auto print_row = [&](const std::string& row, const std::string& test, const std::string& path,
                       const absl::StatusOr<std::vector<double>>& r, int64_t rss,
                       const std::string& last_column = "-") {
    if (!r.ok()) {
      std::fprintf(stderr, "quill-bench: %s %s: %s\n", path.c_str(), test.c_str(),
                   r.status().ToString().c_str());
      rc = 1;
      return;
    }
    const Stats s = Summarize(*r);
    std::printf("%s %s | %.2f ± %.2f | %.0f MiB | %s |\n", row.c_str(), test.c_str(), s.mean,
                s.stddev, MiB(rss), last_column.c_str());
    std::fflush(stdout);
  };
  // Every tg row's mean rate, for the depth ratios printed last.
  struct TgMean {
    TgCase tc;
    double mean;
  };
  std::vector<TgMean> tg_means;
  // `bandwidth_per_rep`: the read bandwidth measured alongside each repetition (interleaved
  // runs); otherwise the one measured first.
  auto print_tg_row = [&](const TgCase& tc, const absl::StatusOr<std::vector<double>>& r,
                          int64_t rss, const std::vector<double>& bandwidth_per_rep = {}) {
    if (!r.ok()) {
      std::fprintf(stderr, "quill-bench: %s %s: %s\n", tc.path->c_str(), tc.test.c_str(),
                   r.status().ToString().c_str());
      rc = 1;
      return;
    }
    const Stats s = Summarize(*r);
    tg_means.push_back({tc, s.mean});
    std::string reads = absl::StrFormat("%.1f GB/s", tc.bytes_per_token * s.mean / 1e9);
    if (bandwidth_per_rep.size() == r->size()) {
      double fraction = 0;
      for (size_t i = 0; i < r->size(); ++i) {
        fraction += tc.bytes_per_token * (*r)[i] / bandwidth_per_rep[i] / r->size();
      }
      absl::StrAppendFormat(&reads, " (%.0f%%)", 100 * fraction);
    } else if (read_bandwidth > 0) {
      absl::StrAppendFormat(&reads, " (%.0f%%)",
                            100 * tc.bytes_per_token * s.mean / read_bandwidth);
    }
    std::printf("%s %s | %.2f ± %.2f | %.0f MiB | %s |\n", tc.row.c_str(), tc.test.c_str(), s.mean,
                s.stddev, MiB(rss), reads.c_str());
    std::fflush(stdout);
  };
  for (const std::string& path : models) {
    ModelOptions options;
    options.path = path;
    options.precision = exact ? kernels::Precision::kExact : kernels::Precision::kFast;
    options.max_batch_tokens = max_tokens;
    // Memory freed by the previous model goes back to the system, so RSS is this model's
    // (interleaved tests keep every model until the end).
    if (!interleave) {
      kept_benches.clear();
      kept_models.clear();
    }
    malloc_trim(0);
    ResetPeakRss();
    auto loaded = Model::Load(options);
    if (!loaded.ok()) {
      std::fprintf(stderr, "quill-bench: %s: %s\n", path.c_str(),
                   loaded.status().ToString().c_str());
      rc = kLoadError;
      continue;
    }
    kept_models.push_back(*std::move(loaded));
    Model& model = *kept_models.back();
    std::fprintf(stderr, "quill-bench: %s: kernels %s\n", path.c_str(),
                 model.kernel_summary().c_str());
    const int64_t rss_after_load = ProcStatusBytes("VmRSS");
    uint64_t tensor_bytes = 0;
    if (auto file = GgufFile::Open(path); file.ok()) {
      for (const GgufTensorInfo& t : (*file)->tensors()) tensor_bytes += t.size_bytes;
    }
    const ModelConfig& c = model.config();
    const int64_t params =
        ComputeAccounting(c, c.context_length, kernels::KvElement::kF32).total_params;
    // The mode column names the KV element too (the tg rows may compare two).
    auto prefix_for = [&](kernels::KvElement element) {
      return absl::StrFormat("| %s | %s | %.2f GiB | %s | %s, kv %s | %d |", Basename(path),
                             model.weight_type_name(), tensor_bytes / 1073741824.0,
                             HumanParams(params), exact ? "exact" : "fast",
                             kernels::KvElementName(element), threads);
    };
    const std::vector<kernels::KvElement> elements =
        kv_elements.empty() ? std::vector<kernels::KvElement>{model.kv_element()} : kv_elements;

    kept_benches.push_back(std::make_unique<Bench>(model, reps, absl::GetFlag(FLAGS_profile)));
    Bench& bench = *kept_benches.back();
    // Decode reads every packed weight once per token, plus the KV of every earlier position.
    auto decode_bytes = [&](int prompt_len, int n, kernels::KvElement element) {
      KvCacheOptions kv = model.MakeKvCacheOptions(0, 16);
      kv.element = element;
      return model.weight_bytes() + kv.bytes_per_token() * (prompt_len + n / 2.0);
    };
    auto report = [&](const std::string& test, const absl::StatusOr<std::vector<double>>& r,
                      kernels::KvElement element) {
      print_row(prefix_for(element), test, path, r, bench.last_rss());
    };
    if (!bd.empty()) {
      const DotKind dot = DotKindOf(model, exact);
      const double peak = compute_peak(dot);
      // A sequence's operations per step: the matmuls, and attention at the steps' mean depth.
      const double ops_per_token = static_cast<double>(
          ComputeAccounting(c, bd_prompt + bd_steps / 2, kernels::KvElement::kF16).flops_per_token);
      double first_step_ms = 0;
      int first_n = 0;
      for (int n : bd) {
        if (bd_prompt + bd_steps > c.context_length) {
          std::fprintf(stderr, "quill-bench: bd needs %d positions > context %ld\n",
                       bd_prompt + bd_steps, static_cast<long>(c.context_length));
          rc = kUsage;
          break;
        }
        const std::string test = absl::StrCat("bd", n, " (", bd_steps, " steps)");
        const absl::StatusOr<std::vector<double>> r = bench.BatchDecode(n, bd_prompt, bd_steps);
        std::string step = "-";
        if (r.ok()) {
          const double tokens_per_second = Summarize(*r).mean;
          const double step_ms = 1e3 * n / tokens_per_second;
          if (first_n == 0) {
            first_step_ms = step_ms;
            first_n = n;
          }
          step = absl::StrFormat("step %.3g ms (%.2fx bd%d)", step_ms, step_ms / first_step_ms,
                                 first_n);
          if (peak > 0) {
            const double rate = ops_per_token * tokens_per_second;
            absl::StrAppendFormat(&step, ", %.0f GOP/s (%.0f%% of %s peak)", rate / 1e9,
                                  100 * rate / peak, DotKindName(dot));
          }
        }
        print_row(prefix_for(model.kv_element()), test, path, r, bench.last_rss(), step);
      }
      continue;
    }
    for (int n : pp) {
      if (n > c.context_length) {
        std::fprintf(stderr, "quill-bench: pp%d exceeds the context %ld\n", n,
                     static_cast<long>(c.context_length));
        continue;
      }
      if (interleave) {
        interleaved_pp.push_back(PpCase{&bench, n, prefix_for(model.kv_element()), &path});
      } else {
        report(absl::StrCat("pp", n), bench.PromptProcessing(n), model.kv_element());
      }
    }
    // Every tg length, depth and KV element: run now one after another, or kept for the
    // interleaved run after the last model.
    for (int n : tg) {
      for (int depth : depths) {
        const int prompt_len = std::max(depth, 4);
        const std::string test =
            depth == 0 ? absl::StrCat("tg", n) : absl::StrCat("tg", n, " @ d", depth);
        if (n + prompt_len > c.context_length) {
          std::fprintf(stderr, "quill-bench: %s needs %d positions > context %ld\n", test.c_str(),
                       n + prompt_len, static_cast<long>(c.context_length));
          continue;
        }
        for (kernels::KvElement element : elements) {
          const TgCase tc{&bench,
                          n,
                          prompt_len,
                          element,
                          prefix_for(element),
                          test,
                          decode_bytes(prompt_len, n, element),
                          &path,
                          depth};
          if (interleave) {
            interleaved.push_back(tc);
          } else {
            const absl::StatusOr<std::vector<double>> r = bench.Generation(n, prompt_len, element);
            print_tg_row(tc, r, bench.last_rss());
          }
        }
      }
    }
    std::fprintf(stderr,
                 "quill-bench: %s: RSS after load %.0f MiB, peak %.0f MiB (tensor data %.0f MiB, "
                 "packed weights %.0f MiB)\n",
                 Basename(path).c_str(), MiB(rss_after_load), MiB(ProcStatusBytes("VmHWM")),
                 MiB(tensor_bytes), MiB(model.weight_bytes()));
  }
  if (!interleaved_pp.empty()) {
    const absl::StatusOr<std::vector<std::vector<double>>> all =
        InterleavedPromptProcessing(interleaved_pp, reps);
    // RSS here is the process's, with every model and pp cache resident.
    const int64_t rss = ProcStatusBytes("VmRSS");
    for (size_t i = 0; i < interleaved_pp.size(); ++i) {
      const PpCase& pc = interleaved_pp[i];
      print_row(pc.row, absl::StrCat("pp", pc.n), *pc.path,
                all.ok() ? absl::StatusOr<std::vector<double>>((*all)[i]) : all.status(), rss);
    }
  }
  if (!interleaved.empty()) {
    // The bandwidth is read in 256 MiB slices between the steps (freed before RSS is read).
    auto probe = bandwidth_mib > 0 ? std::make_unique<tools::ReadBandwidthProbe>(
                                         int64_t{bandwidth_mib} << 20, int64_t{256} << 20)
                                   : nullptr;
    const absl::StatusOr<InterleavedRates> all =
        InterleavedGeneration(interleaved, reps, probe.get());
    probe.reset();
    // RSS here is the process's, with every model and test cache resident.
    const int64_t rss = ProcStatusBytes("VmRSS");
    if (all.ok() && !all->read_bandwidth.empty()) {
      std::printf(
          "read bandwidth between the interleaved steps: %s GB/s per repetition; each "
          "tg row's share is against its own repetition's\n",
          absl::StrJoin(all->read_bandwidth, ", ", [](std::string* out, double b) {
            absl::StrAppendFormat(out, "%.1f", b / 1e9);
          }).c_str());
    }
    for (size_t i = 0; i < interleaved.size(); ++i) {
      print_tg_row(interleaved[i],
                   all.ok() ? absl::StatusOr<std::vector<double>>(all->rates[i]) : all.status(),
                   rss, all.ok() ? all->read_bandwidth : std::vector<double>());
    }
  }
  // Decode at depth against decode after the short prompt (same model, length and KV
  // element): what a long context costs.
  for (const TgMean& deep : tg_means) {
    if (deep.tc.depth == 0) continue;
    for (const TgMean& shallow : tg_means) {
      if (shallow.tc.depth == 0 && *shallow.tc.path == *deep.tc.path && shallow.tc.n == deep.tc.n &&
          shallow.tc.element == deep.tc.element) {
        std::printf("depth ratio: %s kv %s: %s / tg%d = %.3f\n", Basename(*deep.tc.path).c_str(),
                    kernels::KvElementName(deep.tc.element), deep.tc.test.c_str(), deep.tc.n,
                    deep.mean / shallow.mean);
        break;  // one depth-0 row per model, length and element
      }
    }
  }
  return rc;
}

}  // namespace
}  // namespace quill::engine

int main(int argc, char** argv) { return quill::engine::Main(argc, argv); }
