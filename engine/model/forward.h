#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/ops.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/batch_entry.h"
#include "engine/model/model_config.h"
#include "engine/model/model_profile.h"
#include "engine/model/model_weights.h"

namespace quill::engine {

// One forward step of a decoder over a batch. Reads only `config` (sizes and the decoder
// description) and `weights`: which norm, FFN, position encoding, biases, post-norms,
// soft-caps and windows run is decided by the description, never by a family name. Holds
// the scratch for max_tokens rows, allocated once here; Run() allocates nothing. Not
// thread-safe: one caller at a time (the engine thread). `config` and `weights` must
// outlive it.
class ForwardPass {
 public:
  ForwardPass(const ModelConfig& config, ModelWeights& weights, int max_tokens);

  // `batch` must already be valid for `cache` (Model::Forward checks it). Writes K/V of
  // every token to `cache` and logits of the entries that want them to consecutive rows of
  // `logits`. With `profiling`, adds per-phase times to `profile` (sized for the layers).
  void Run(absl::Span<const BatchEntry> batch, KvCache& cache, float* logits, bool profiling,
           ModelProfile& profile);

 private:
  // RMSNorm or LayerNorm per the description; an empty `bias` means none.
  void Norm(const float* x, const std::vector<float>& weight, const std::vector<float>& bias,
            int rows, float* out) const;
  // Adds the time since the previous lap to a profile slot, when profiling.
  class PhaseTimer {
   public:
    explicit PhaseTimer(bool on);
    void Lap(double* slot);
    double Total() const;  // seconds since construction

   private:
    bool on_;
    std::chrono::steady_clock::time_point begin_, last_;
  };

  // Attention sub-block of layer `l` (norm, QKV, RoPE and cache writes, attention, output
  // projection, post-norm, residual). Returns the rows the rest of the layer works on (all
  // T, or the compacted logit rows in the last layer).
  int AttentionBlock(int l, int T, int n_logits, KvCache& cache, PhaseTimer& timer,
                     ModelProfile::LayerTimes& lt);
  // FFN sub-block over `rows` rows (norm, up or gate|up, activation, down, post-norm,
  // residual).
  void FeedForwardBlock(LayerWeights& layer, int rows, PhaseTimer& timer,
                        ModelProfile::LayerTimes& lt);
  // Flattens the batch into rows; returns the number of rows wanting logits.
  int Flatten(absl::Span<const BatchEntry> batch, KvCache& cache, int* num_tokens);
  void Embed(int T);
  // Writes K/V of the T rows to the layer's cache and leaves rotated queries in q_ (all
  // rows, or only the logit rows in the last layer).
  void QueryKeyValue(int layer, int T, int n_logits, KvCache& cache);

  const ModelConfig& config_;
  ModelWeights& weights_;

  // Shapes.
  int d_ = 0;
  int n_heads_ = 0;
  int n_kv_ = 0;
  int head_dim_ = 0;
  int q_dim_ = 0;   // n_heads * head_dim
  int kv_dim_ = 0;  // n_kv * head_dim
  int qkv_dim_ = 0;
  int ffn_ = 0;
  float embed_scale_ = 1.0f;
  kernels::RopeSpec rope_;
  kernels::AttentionParams attention_;  // window set per layer

  // Scratch for max_tokens rows.
  std::vector<float> hidden_, normed_, qkv_, q_, k_, attn_out_, proj_, gate_up_, ffn_out_;
  std::vector<int32_t> positions_;
  std::vector<TokenId> tokens_;
  std::vector<int64_t> slots_;  // KV cache slot of each row (KvCache::Slot)
  std::vector<int32_t> logit_rows_;
  std::vector<int32_t> logit_positions_;
  std::vector<kernels::AttentionSequence> attn_seqs_;
  std::vector<kernels::AttentionSequence> last_seqs_;  // last layer: logit rows only
  int num_seqs_ = 0;
};

}  // namespace quill::engine
