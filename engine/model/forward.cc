#include "engine/model/forward.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/kernels/parallel_for.h"

namespace quill::engine {
namespace {

using Clock = std::chrono::steady_clock;

const float* OrNull(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

}  // namespace

ForwardPass::ForwardPass(const ModelConfig& config, ModelWeights& weights, int max_tokens)
    : config_(config), weights_(weights) {
  const DecoderDescription& dd = config.decoder;
  d_ = static_cast<int>(config.embedding_length);
  n_heads_ = static_cast<int>(config.head_count);
  n_kv_ = static_cast<int>(config.head_count_kv);
  head_dim_ = static_cast<int>(config.head_dim);
  q_dim_ = n_heads_ * head_dim_;
  kv_dim_ = n_kv_ * head_dim_;
  qkv_dim_ = q_dim_ + 2 * kv_dim_;
  ffn_ = static_cast<int>(config.feed_forward_length);
  // Gemma: sqrt(d_model) rounded to f32, as the reference implementation multiplies.
  embed_scale_ = dd.scale_embeddings ? std::sqrt(static_cast<float>(d_)) : 1.0f;
  rope_.rope_dim = static_cast<int>(config.rope_dimension_count);
  rope_.freq_base = config.rope_freq_base;
  rope_.layout = dd.positions == PositionKind::kRopeNeox ? kernels::RopeLayout::kNeox
                                                         : kernels::RopeLayout::kNormal;
  rope_.freq_factors = OrNull(weights.rope_freq_factors);
  attention_.scale = config.attention_scale();
  attention_.softcap = dd.attn_softcap;

  const size_t T = static_cast<size_t>(max_tokens);
  hidden_.assign(T * d_, 0.0f);
  normed_.assign(T * d_, 0.0f);
  qkv_.assign(T * qkv_dim_, 0.0f);
  q_.assign(T * q_dim_, 0.0f);
  k_.assign(T * kv_dim_, 0.0f);
  attn_out_.assign(T * q_dim_, 0.0f);
  proj_.assign(T * d_, 0.0f);
  gate_up_.assign(T * 2 * ffn_, 0.0f);
  ffn_out_.assign(T * ffn_, 0.0f);
  positions_.assign(T, 0);
  tokens_.assign(T, 0);
  slots_.assign(T, 0);
  logit_rows_.assign(T, 0);
  logit_positions_.assign(T, 0);
  attn_seqs_.resize(T);
  last_seqs_.resize(T);
}

void ForwardPass::Norm(const float* x, const std::vector<float>& weight,
                       const std::vector<float>& bias, int rows, float* out) const {
  if (config_.decoder.norm == NormKind::kRmsNorm) {
    kernels::RmsNorm(x, weight.data(), rows, d_, config_.norm_eps, out);
  } else {
    kernels::LayerNorm(x, weight.data(), OrNull(bias), rows, d_, config_.norm_eps, out);
  }
}

int ForwardPass::Flatten(absl::Span<const BatchEntry> batch, KvCache& cache, int* num_tokens) {
  int T = 0;
  int n_logits = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchEntry& e = batch[i];
    const int n = static_cast<int>(e.tokens.size());
    absl::Span<const int32_t> table = cache.block_table(e.seq);
    attn_seqs_[i] = {table.data(), T, n, e.first_pos};
    for (int j = 0; j < n; ++j) {
      tokens_[T + j] = e.tokens[j];
      positions_[T + j] = e.first_pos + j;
      slots_[T + j] = cache.Slot(e.seq, e.first_pos + j);
    }
    if (e.want_logits) {
      // Each logit row attends alone in the last layer, as a one-token decode would.
      for (int j = n - e.num_logits; j < n; ++j) {
        last_seqs_[n_logits] = {table.data(), n_logits, 1, e.first_pos + j};
        logit_rows_[n_logits++] = T + j;
      }
    }
    T += n;
  }
  num_seqs_ = static_cast<int>(batch.size());
  *num_tokens = T;
  return n_logits;
}

void ForwardPass::Embed(int T) {
  const DecoderDescription& dd = config_.decoder;
  float* hidden = hidden_.data();
  kernels::ParallelFor(T, T >= 16, [&](int64_t t) {
    kernels::DequantizeRow(weights_.token_embedding, tokens_[t], hidden + t * d_);
  });
  if (dd.scale_embeddings) kernels::Scale(hidden, static_cast<int64_t>(T) * d_, embed_scale_);
  if (dd.positions == PositionKind::kLearned) {
    kernels::AddTableRows(hidden, weights_.position_embedding.data(), positions_.data(), T, d_);
  }
}

void ForwardPass::QueryKeyValue(int l, int T, int n_logits, KvCache& cache) {
  const bool last = l == static_cast<int>(weights_.layers.size()) - 1;
  const bool rope = config_.decoder.uses_rope();
  // Split q and k out of the fused rows (RoPE and attention want dense rows), rotate
  // them, and store k and v in the cache. In the last layer only the rows that produce
  // logits need their query.
  void* kc = cache.k_data(l);
  void* vc = cache.v_data(l);
  const kernels::KvLayout& layout = cache.layout();
  const float* qkv = qkv_.data();
  float* k = k_.data();
  const int64_t* slots = slots_.data();
  const int q_dim = q_dim_, kv_dim = kv_dim_, qkv_dim = qkv_dim_;
  kernels::ParallelFor(T, T >= 64, [&](int64_t t) {
    const float* row = qkv + t * qkv_dim;
    std::memcpy(k + t * kv_dim, row + q_dim, kv_dim * sizeof(float));
    for (int kv = 0; kv < n_kv_; ++kv) {
      kernels::StoreValue(row + q_dim + kv_dim + kv * head_dim_, layout, vc, slots[t], kv);
    }
  });
  const int q_rows = last ? n_logits : T;
  for (int r = 0; r < q_rows; ++r) {
    const int t = last ? logit_rows_[r] : r;
    std::memcpy(q_.data() + static_cast<size_t>(r) * q_dim, qkv + static_cast<size_t>(t) * qkv_dim,
                q_dim * sizeof(float));
  }
  if (rope) kernels::Rope(k, positions_.data(), T, n_kv_, head_dim_, rope_);
  for (int t = 0; t < T; ++t) {
    for (int kv = 0; kv < n_kv_; ++kv) {
      kernels::StoreKey(k + static_cast<size_t>(t) * kv_dim + kv * head_dim_, layout, kc, slots[t],
                        kv);
    }
  }
  if (!rope || q_rows == 0) return;
  if (last) {
    for (int r = 0; r < n_logits; ++r) logit_positions_[r] = positions_[logit_rows_[r]];
    kernels::Rope(q_.data(), logit_positions_.data(), n_logits, n_heads_, head_dim_, rope_);
  } else {
    kernels::Rope(q_.data(), positions_.data(), T, n_heads_, head_dim_, rope_);
  }
}

ForwardPass::PhaseTimer::PhaseTimer(bool on) : on_(on) {
  if (on_) begin_ = last_ = Clock::now();
}

void ForwardPass::PhaseTimer::Lap(double* slot) {
  if (!on_) return;
  const Clock::time_point now = Clock::now();
  *slot += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

double ForwardPass::PhaseTimer::Total() const {
  return std::chrono::duration<double>(Clock::now() - begin_).count();
}

void ForwardPass::Run(absl::Span<const BatchEntry> batch, KvCache& cache, float* logits, bool prof,
                      ModelProfile& pr) {
  PhaseTimer timer(prof);
  int T = 0;
  const int n_logits = Flatten(batch, cache, &T);
  Embed(T);
  timer.Lap(&pr.embed);

  const int L = static_cast<int>(weights_.layers.size());
  for (int l = 0; l < L; ++l) {
    const int rows = AttentionBlock(l, T, n_logits, cache, timer, pr.layers[l]);
    if (rows == 0) break;  // last layer, no logits wanted: only its K/V mattered
    FeedForwardBlock(weights_.layers[l], rows, timer, pr.layers[l]);
  }

  if (n_logits > 0) {
    // After the last layer the logit rows are the first n_logits rows of `hidden`.
    Norm(hidden_.data(), weights_.output_norm, weights_.output_norm_bias, n_logits, normed_.data());
    weights_.lm_head->Run(normed_.data(), n_logits, logits);
    if (config_.decoder.final_softcap > 0.0f) {
      kernels::SoftCap(logits, static_cast<int64_t>(n_logits) * config_.vocab_size,
                       config_.decoder.final_softcap);
    }
    timer.Lap(&pr.lm_head);
  }
  if (prof) {
    pr.total += timer.Total();
    pr.steps += 1;
    pr.tokens += T;
  }
}

int ForwardPass::AttentionBlock(int l, int T, int n_logits, KvCache& cache, PhaseTimer& timer,
                                ModelProfile::LayerTimes& lt) {
  LayerWeights& layer = weights_.layers[l];
  const bool last = l == static_cast<int>(weights_.layers.size()) - 1;
  float* hidden = hidden_.data();
  float* proj = proj_.data();

  Norm(hidden, layer.attn_norm, layer.attn_norm_bias, T, normed_.data());
  timer.Lap(&lt.norm);
  layer.qkv->Run(normed_.data(), T, qkv_.data());
  if (!layer.qkv_bias.empty()) kernels::AddBias(qkv_.data(), layer.qkv_bias.data(), T, qkv_dim_);
  timer.Lap(&lt.qkv);
  QueryKeyValue(l, T, n_logits, cache);
  timer.Lap(&lt.rope_kv);
  if (last && n_logits == 0) return 0;

  kernels::AttentionParams params = attention_;
  params.window = layer.window;
  const auto seqs = last ? absl::MakeConstSpan(last_seqs_.data(), n_logits)
                         : absl::MakeConstSpan(attn_seqs_.data(), num_seqs_);
  kernels::PagedAttention(q_.data(), cache.k_data(l), cache.v_data(l), cache.layout(), seqs,
                          n_heads_, params, attn_out_.data());
  timer.Lap(&lt.attention);

  // In the last layer the rest only matters for the logit rows: compact them.
  int rows = T;
  if (last) {
    rows = n_logits;
    for (int r = 0; r < n_logits; ++r) {
      if (logit_rows_[r] != r) {
        std::memcpy(hidden + static_cast<size_t>(r) * d_,
                    hidden + static_cast<size_t>(logit_rows_[r]) * d_, d_ * sizeof(float));
      }
    }
  }
  layer.o->Run(attn_out_.data(), rows, proj);
  if (!layer.o_bias.empty()) kernels::AddBias(proj, layer.o_bias.data(), rows, d_);
  timer.Lap(&lt.o);
  if (!layer.post_attn_norm.empty()) Norm(proj, layer.post_attn_norm, {}, rows, proj);
  kernels::AddInPlace(hidden, proj, static_cast<int64_t>(rows) * d_);
  return rows;
}

void ForwardPass::FeedForwardBlock(LayerWeights& layer, int rows, PhaseTimer& timer,
                                   ModelProfile::LayerTimes& lt) {
  float* hidden = hidden_.data();
  float* proj = proj_.data();
  Norm(hidden, layer.ffn_norm, layer.ffn_norm_bias, rows, normed_.data());
  timer.Lap(&lt.norm);
  layer.up->Run(normed_.data(), rows, gate_up_.data());
  if (!layer.up_bias.empty()) {
    kernels::AddBias(gate_up_.data(), layer.up_bias.data(), rows,
                     static_cast<int>(layer.up_bias.size()));
  }
  timer.Lap(&lt.gate_up);
  switch (config_.decoder.ffn) {
    case FfnKind::kSwiGlu:
      kernels::SwiGlu(gate_up_.data(), rows, ffn_, ffn_out_.data());
      break;
    case FfnKind::kGeGlu:
      kernels::GeGlu(gate_up_.data(), rows, ffn_, ffn_out_.data());
      break;
    case FfnKind::kGelu:
      kernels::Gelu(gate_up_.data(), static_cast<int64_t>(rows) * ffn_, ffn_out_.data());
      break;
  }
  timer.Lap(&lt.activation);
  layer.down->Run(ffn_out_.data(), rows, proj);
  if (!layer.down_bias.empty()) kernels::AddBias(proj, layer.down_bias.data(), rows, d_);
  timer.Lap(&lt.down);
  if (!layer.post_ffn_norm.empty()) Norm(proj, layer.post_ffn_norm, {}, rows, proj);
  kernels::AddInPlace(hidden, proj, static_cast<int64_t>(rows) * d_);
  timer.Lap(&lt.norm);
}

}  // namespace quill::engine
