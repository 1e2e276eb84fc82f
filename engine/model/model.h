#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/gguf/gguf_file.h"
#include "engine/kernels/linear.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/batch_entry.h"
#include "engine/model/model_config.h"
#include "engine/model/model_profile.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {

// How far Model::Load has come: packing takes time in proportion to the file's size (12.4 s
// for a 1.1B F16 file on 2 cores), so a server reports it.
struct LoadProgress {
  int64_t layers_packed = 0;
  int64_t layers_total = 0;
  int64_t bytes_packed = 0;  // packed weight bytes held so far
};

struct ModelOptions {
  std::string path;
  kernels::Precision precision = kernels::Precision::kFast;
  int max_batch_tokens = 512;  // most tokens one Forward() may carry (sizes all scratch)
  // What the KV cache stores; unset: f32 in exact mode, f16 in fast mode. Exact mode takes
  // only f32 (its logits are bit-exact); whether the model's heads suit q8 or bf16 is
  // KvCache::Create's to say.
  std::optional<kernels::KvElement> kv_element;
  // Called on the loading thread after each transformer layer's weights are packed; may be
  // empty.
  std::function<void(const LoadProgress&)> on_progress;
};

// A loaded decoder-only model of any supported family (ModelConfig::decoder says how it
// computes): config, tokenizer and weights packed once for the chosen precision, plus the
// scratch for one forward step. Forward() is called from one thread
// (the engine thread, or quill-run's main thread); accessors are const and thread-safe.
class Model {
 public:
  // NOT_FOUND / INVALID_ARGUMENT / DATA_LOSS with the loader's message for a bad file;
  // INVALID_ARGUMENT for an unsupported architecture, tensor type or inconsistent shapes.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const ModelOptions& options);
  ~Model();

  const ModelConfig& config() const;
  const Tokenizer& tokenizer() const;
  const ModelOptions& options() const;
  // The GGUF's tokenizer.chat_template source, unparsed; nullopt when the file has none.
  const std::optional<std::string>& chat_template() const;
  int64_t weight_bytes() const;  // bytes of packed weights held in memory (heap copies)
  // Bytes of weights read in place from the file mapping at run time (the token embedding
  // table): resident only as far as rows are looked up, so at most this much.
  int64_t mapped_weight_bytes() const;
  int64_t scratch_bytes() const;         // run-time scratch the matmuls share
  std::string weight_type_name() const;  // e.g. "BF16", "Q8_0", "F32" (of the matmul weights)
  std::string kernel_summary() const;    // which matmul kernels were chosen
  // A Forward() of about `tokens` tokens that holds a multiple of this many runs its matmuls
  // in whole kernel blocks (Linear::row_multiple()): a step of 96 tokens costs less than one
  // of 90. 1 below Linear::blocked_from_rows(), where every token costs alike.
  int step_token_multiple(int tokens) const;

  // How the KV cache stores K/V for this precision: f32 in exact mode (bit-exact logits),
  // f16 in fast mode (half the memory, and half the bytes a long context's decode reads).
  kernels::KvElement kv_element() const;
  // KV cache options matching this model's shape and precision for a byte budget.
  KvCacheOptions MakeKvCacheOptions(int64_t budget_bytes, int block_size_tokens) const;

  // Runs one step over all tokens of `batch` (sum of token counts <= max_batch_tokens):
  // every linear layer is one matmul over all of them. Writes K/V for every token into
  // `cache` (each seq must already have capacity >= first_pos + tokens.size()), and the
  // logits of each entry with want_logits (its last num_logits tokens) to consecutive
  // rows of `logits` (vocab_size floats each, in entry order). Never allocates.
  absl::Status Forward(absl::Span<const BatchEntry> batch, KvCache& cache, float* logits);

  // Per-phase timing of Forward() (for quill-bench --profile). Off by default; turning it
  // on or off clears the totals. Same threading rule as Forward().
  void SetProfiling(bool on);
  // While paused, Forward() is not timed and the totals are kept (quill-bench leaves a
  // test's untimed set-up, its prefill, out of the profile of its timed steps).
  void PauseProfiling(bool paused);
  const ModelProfile& profile() const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quill::engine
