// quill-bench: prompt-processing and generation throughput, in the style of llama-bench.
//
//   OMP_NUM_THREADS=2 quill-bench -m a.gguf,b.gguf [--threads 2] [--reps 3]
//   quill-bench -m a.gguf --batch-decode 1,4,16,64
//
// pp<N>: one Forward() over N prompt tokens (tokens/s). tg<N>: N single-token Forward()
// steps after a 4-token prompt. bd<B>: B sequences decoding together, one batched Forward()
// per step (aggregate tokens/s).

#include <malloc.h>
#include <omp.h>

#include <algorithm>
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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/base/status_macros.h"
#include "engine/gguf/gguf_file.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/tools/tool_flags.h"

ABSL_FLAG(std::vector<std::string>, model, {}, "GGUF model(s), comma-separated (alias -m).");
ABSL_FLAG(std::string, pp, "512", "Prompt-processing sizes, comma-separated (0 = skip).");
ABSL_FLAG(std::string, tg, "128", "Generation lengths, comma-separated (0 = skip).");
ABSL_FLAG(std::string, batch_decode, "",
          "Batched-decode mode: numbers of sequences decoding together, e.g. 1,4,16,64. "
          "Replaces the pp/tg tests.");
ABSL_FLAG(int, bd_steps, 32, "Decode steps per repetition in --batch-decode mode.");
ABSL_FLAG(int, bd_prompt, 16, "Prompt tokens per sequence in --batch-decode mode.");
ABSL_FLAG(int, reps, 3, "Repetitions per test (after one warm-up run).");
ABSL_FLAG(int, threads, 0, "OpenMP threads (alias -t); 0 = $OMP_NUM_THREADS, else 2.");
ABSL_FLAG(bool, exact, false, "Benchmark the exact (f32) kernels instead of the fast ones.");
ABSL_FLAG(bool, profile, false, "Print a per-phase time breakdown of each test to stderr.");
ABSL_FLAG(bool, trace_steps, false, "Print every decode step's latency (ms) to stderr (tg tests).");

namespace quill::engine {
namespace {

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

class Bench {
 public:
  Bench(Model& model, int reps, bool profile) : model_(model), reps_(reps), profile_(profile) {
    vocab_ = model.config().vocab_size;
    std::mt19937 rng(1234);
    std::uniform_int_distribution<TokenId> dist(3, static_cast<TokenId>(vocab_ - 1));
    random_tokens_.resize(4096);
    for (TokenId& t : random_tokens_) t = dist(rng);
    const TokenId bos = model.tokenizer().bos_id();
    if (bos >= 0) random_tokens_[0] = bos;
  }

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

  absl::StatusOr<std::unique_ptr<KvCache>> MakeCache(int64_t tokens) {
    const int block = 16;
    KvCacheOptions o = model_.MakeKvCacheOptions(0, block);
    const int64_t per_token =
        int64_t{2} * o.num_layers * o.num_kv_heads * o.head_dim * static_cast<int64_t>(sizeof(float));
    o.budget_bytes = (tokens + block - 1) / block * block * per_token;
    return KvCache::Create(o);
  }

  absl::StatusOr<std::vector<double>> PromptProcessing(int n) {
    QUILL_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, MakeCache(n));
    std::vector<float> logits(vocab_);
    std::vector<TokenId> prompt(random_tokens_.begin(), random_tokens_.begin() + n);
    return Repeat(
        [&]() -> absl::StatusOr<std::pair<int64_t, double>> {
          cache->Release(0);
          QUILL_RETURN_IF_ERROR(cache->Reserve(0, n));
          BatchEntry e{0, prompt, 0, true};
          auto t0 = std::chrono::steady_clock::now();
          QUILL_RETURN_IF_ERROR(model_.Forward({&e, 1}, *cache, logits.data()));
          double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          return std::make_pair(int64_t{n}, s);
        },
        absl::StrCat("pp", n));
  }

  absl::StatusOr<std::vector<double>> Generation(int n) {
    const int prompt_len = 4;
    QUILL_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, MakeCache(prompt_len + n));
    std::vector<float> logits(vocab_);
    std::vector<TokenId> history;
    return Repeat(
        [&]() -> absl::StatusOr<std::pair<int64_t, double>> {
          cache->Release(0);
          QUILL_RETURN_IF_ERROR(cache->Reserve(0, prompt_len + n));
          history.assign(random_tokens_.begin(), random_tokens_.begin() + prompt_len);
          BatchEntry e{0, history, 0, true};
          QUILL_RETURN_IF_ERROR(model_.Forward({&e, 1}, *cache, logits.data()));
          auto t0 = std::chrono::steady_clock::now();
          auto last = t0;
          for (int i = 0; i < n; ++i) {
            history.push_back(Argmax(logits.data(), vocab_));
            BatchEntry d{0, absl::MakeConstSpan(&history.back(), 1),
                         static_cast<int32_t>(history.size() - 1), true};
            QUILL_RETURN_IF_ERROR(model_.Forward({&d, 1}, *cache, logits.data()));
            if (trace_) {
              auto now = std::chrono::steady_clock::now();
              std::fprintf(stderr, "%.1f%c", std::chrono::duration<double>(now - last).count() * 1e3,
                           i + 1 == n ? '\n' : ' ');
              last = now;
            }
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
          // Prefill every sequence (untimed), as many per Forward() as fit.
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
            QUILL_RETURN_IF_ERROR(model_.Forward(absl::MakeConstSpan(entries.data(), n), *cache,
                                                 logits.data() + static_cast<size_t>(s0) * vocab_));
          }
          auto t0 = std::chrono::steady_clock::now();
          for (int step = 0; step < steps; ++step) {
            for (int s = 0; s < num_seqs; ++s) {
              hist[s].push_back(Argmax(logits.data() + static_cast<size_t>(s) * vocab_, vocab_));
              entries[s] = BatchEntry{s, absl::MakeConstSpan(&hist[s].back(), 1),
                                      static_cast<int32_t>(hist[s].size() - 1), true};
            }
            QUILL_RETURN_IF_ERROR(model_.Forward(entries, *cache, logits.data()));
          }
          double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
      "  quill-bench -m MODEL.gguf --batch-decode 1,4,16,64 [--bd-steps 32]\n"
      "\n"
      "Prints one markdown table row per model and test: t/s is the mean +- stddev over the\n"
      "repetitions. Short aliases: -m --model, -t --threads, -r --reps, -h --help.");
  tools::ShowToolFlagsInHelp();
  std::vector<std::string> args = tools::NormalizeArgs(
      argc, argv, {{"m", "model"}, {"t", "threads"}, {"r", "reps"}, {"h", "help"}});
  if (std::string bad = tools::FirstUnknownFlag(args); !bad.empty()) {
    std::fprintf(stderr, "quill-bench: unknown flag %s (see --help)\n", bad.c_str());
    return kUsage;
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  std::vector<char*> positional = absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());
  std::vector<std::string> models = absl::GetFlag(FLAGS_model);
  for (size_t i = 1; i < positional.size(); ++i) models.push_back(positional[i]);
  if (models.empty()) {
    std::fprintf(stderr, "quill-bench: no model given (use -m MODEL.gguf; see --help)\n");
    return kUsage;
  }
  bool ok_pp, ok_tg, ok_bd;
  const std::vector<int> pp = ParseSizes(absl::GetFlag(FLAGS_pp), &ok_pp);
  const std::vector<int> tg = ParseSizes(absl::GetFlag(FLAGS_tg), &ok_tg);
  const std::vector<int> bd = ParseSizes(absl::GetFlag(FLAGS_batch_decode), &ok_bd);
  const int reps = absl::GetFlag(FLAGS_reps);
  const int bd_steps = absl::GetFlag(FLAGS_bd_steps);
  const int bd_prompt = absl::GetFlag(FLAGS_bd_prompt);
  if (!ok_pp || !ok_tg || !ok_bd || reps < 1 || bd_steps < 1 || bd_prompt < 1) {
    std::fprintf(stderr,
                 "quill-bench: --pp/--tg/--batch-decode take comma-separated non-negative "
                 "integers; --reps, --bd-steps, --bd-prompt must be >= 1\n");
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

  std::printf("| model | type | size | params | mode | threads | test | t/s | RSS |\n");
  std::printf("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n");
  std::fflush(stdout);
  int rc = 0;
  for (const std::string& path : models) {
    ModelOptions options;
    options.path = path;
    options.precision = exact ? kernels::Precision::kExact : kernels::Precision::kFast;
    options.max_batch_tokens = max_tokens;
    // Memory freed by the previous model goes back to the system, so RSS is this model's.
    malloc_trim(0);
    ResetPeakRss();
    auto loaded = Model::Load(options);
    if (!loaded.ok()) {
      std::fprintf(stderr, "quill-bench: %s: %s\n", path.c_str(), loaded.status().ToString().c_str());
      rc = kLoadError;
      continue;
    }
    Model& model = **loaded;
    std::fprintf(stderr, "quill-bench: %s: kernels %s\n", path.c_str(), model.kernel_summary().c_str());
    const int64_t rss_after_load = ProcStatusBytes("VmRSS");
    uint64_t tensor_bytes = 0;
    if (auto file = GgufFile::Open(path); file.ok()) {
      for (const GgufTensorInfo& t : (*file)->tensors()) tensor_bytes += t.size_bytes;
    }
    const ModelConfig& c = model.config();
    const int64_t params = ComputeAccounting(c, c.context_length, 4).total_params;
    const std::string prefix = absl::StrFormat(
        "| %s | %s | %.2f GiB | %s | %s | %d |", Basename(path), model.weight_type_name(),
        tensor_bytes / 1073741824.0, HumanParams(params), exact ? "exact" : "fast", threads);

    Bench bench(model, reps, absl::GetFlag(FLAGS_profile));
    auto report = [&](const std::string& test, const absl::StatusOr<std::vector<double>>& r) {
      if (!r.ok()) {
        std::fprintf(stderr, "quill-bench: %s %s: %s\n", path.c_str(), test.c_str(),
                     r.status().ToString().c_str());
        rc = 1;
        return;
      }
      const Stats s = Summarize(*r);
      std::printf("%s %s | %.2f ± %.2f | %.0f MiB |\n", prefix.c_str(), test.c_str(), s.mean,
                  s.stddev, MiB(bench.last_rss()));
      std::fflush(stdout);
    };
    if (!bd.empty()) {
      for (int n : bd) {
        if (bd_prompt + bd_steps > c.context_length) {
          std::fprintf(stderr, "quill-bench: bd needs %d positions > context %ld\n",
                       bd_prompt + bd_steps, static_cast<long>(c.context_length));
          rc = kUsage;
          break;
        }
        report(absl::StrCat("bd", n, " (", bd_steps, " steps)"),
               bench.BatchDecode(n, bd_prompt, bd_steps));
      }
      continue;
    }
    for (int n : pp) {
      if (n > c.context_length) {
        std::fprintf(stderr, "quill-bench: pp%d exceeds the context %ld\n", n,
                     static_cast<long>(c.context_length));
        continue;
      }
      report(absl::StrCat("pp", n), bench.PromptProcessing(n));
    }
    for (int n : tg) {
      if (n + 4 > c.context_length) {
        std::fprintf(stderr, "quill-bench: tg%d exceeds the context %ld\n", n,
                     static_cast<long>(c.context_length));
        continue;
      }
      report(absl::StrCat("tg", n), bench.Generation(n));
    }
    std::fprintf(stderr,
                 "quill-bench: %s: RSS after load %.0f MiB, peak %.0f MiB (tensor data %.0f MiB, "
                 "packed weights %.0f MiB)\n",
                 Basename(path).c_str(), MiB(rss_after_load), MiB(ProcStatusBytes("VmHWM")),
                 MiB(tensor_bytes), MiB(model.weight_bytes()));
  }
  return rc;
}

}  // namespace
}  // namespace quill::engine

int main(int argc, char** argv) { return quill::engine::Main(argc, argv); }
