#include "engine/model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"
#include "engine/gguf/ggml_types.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/ops.h"
#include "engine/model/model_profile.h"
#include "engine/quant/block_layout.h"

namespace quill::engine {
namespace {

using kernels::Linear;
using kernels::WeightType;
using kernels::WeightView;

// The GGUF types the matmul kernels accept, and their kernel-side names.
bool ToWeightType(GgmlType type, WeightType* out) {
  switch (type) {
    case GgmlType::kF32: *out = WeightType::kF32; return true;
    case GgmlType::kF16: *out = WeightType::kF16; return true;
    case GgmlType::kBF16: *out = WeightType::kBF16; return true;
    case GgmlType::kQ8_0: *out = WeightType::kQ8_0; return true;
    case GgmlType::kQ4_0: *out = WeightType::kQ4_0; return true;
    case GgmlType::kQ4_1: *out = WeightType::kQ4_1; return true;
    case GgmlType::kQ5_0: *out = WeightType::kQ5_0; return true;
    case GgmlType::kQ5_1: *out = WeightType::kQ5_1; return true;
    case GgmlType::kQ4_K: *out = WeightType::kQ4_K; return true;
    case GgmlType::kQ5_K: *out = WeightType::kQ5_K; return true;
    case GgmlType::kQ6_K: *out = WeightType::kQ6_K; return true;
    default: return false;
  }
}

// A 2-D weight `name` with `rows` outputs of `cols` inputs (GGUF dims {cols, rows}).
absl::StatusOr<WeightView> BindMatrix(const GgufFile& file, const std::string& name,
                                      int64_t rows, int64_t cols) {
  const GgufTensorInfo* t = file.FindTensor(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("missing tensor '", name, "' in ", file.path()));
  }
  WeightView view;
  if (!ToWeightType(t->type, &view.type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has unsupported type ", GgmlTypeName(t->type),
                     " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, ",
                     "Q6_K)"));
  }
  bool shape_ok = t->dims.size() == 2 && t->dims[0] == cols && t->dims[1] == rows;
  if (!shape_ok && t->dims.size() > 2) {
    // Trailing dimensions of size 1 are harmless.
    shape_ok = t->dims[0] == cols && t->dims[1] == rows;
    for (size_t i = 2; i < t->dims.size(); ++i) shape_ok = shape_ok && t->dims[i] == 1;
  }
  if (!shape_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' has shape [", absl::StrJoin(t->dims, ", "), "], expected [", cols,
        ", ", rows, "]"));
  }
  // Block types: whole blocks per row, and finite scales (the embedding rows are read
  // without going through Linear's checks).
  if (quant::QuantType q; ToQuantType(t->type, &q)) {
    if (cols % quant::BlockElements(q) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' is ", GgmlTypeName(t->type), " with ", cols,
                       " columns (not a multiple of ", quant::BlockElements(q), ")"));
    }
    const int64_t blocks_per_row = cols / quant::BlockElements(q);
    if (int64_t bad = quant::FindNonFiniteScale(q, t->data, rows * blocks_per_row); bad >= 0) {
      return absl::DataLossError(absl::StrCat("tensor '", name, "' row ", bad / blocks_per_row,
                                              " block ", bad % blocks_per_row,
                                              " has a NaN or infinite scale"));
    }
  }
  view.data = t->data;
  view.rows = rows;
  view.cols = cols;
  return view;
}

// A norm weight of `dim` elements, widened exactly to f32.
absl::StatusOr<std::vector<float>> BindNorm(const GgufFile& file, const std::string& name,
                                            int64_t dim) {
  const GgufTensorInfo* t = file.FindTensor(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("missing tensor '", name, "' in ", file.path()));
  }
  if (t->num_elements != dim || t->dims.empty() || t->dims[0] != dim) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape [",
                                                   absl::StrJoin(t->dims, ", "),
                                                   "], expected [", dim, "]"));
  }
  std::vector<float> out(dim);
  switch (t->type) {
    case GgmlType::kF32:
      std::memcpy(out.data(), t->data, dim * sizeof(float));
      break;
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      for (int64_t i = 0; i < dim; ++i) {
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);
        out[i] = t->type == GgmlType::kF16 ? kernels::Fp16ToFloat(h) : kernels::Bf16ToFloat(h);
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("norm tensor '", name,
                                                     "' has unsupported type ",
                                                     GgmlTypeName(t->type),
                                                     " (supported: F32, F16, BF16)"));
  }
  return out;
}

const char* WeightTypeName(WeightType t) {
  switch (t) {
    case WeightType::kF32: return "F32";
    case WeightType::kF16: return "F16";
    case WeightType::kBF16: return "BF16";
    case WeightType::kQ8_0: return "Q8_0";
    case WeightType::kQ4_0: return "Q4_0";
    case WeightType::kQ4_1: return "Q4_1";
    case WeightType::kQ5_0: return "Q5_0";
    case WeightType::kQ5_1: return "Q5_1";
    case WeightType::kQ4_K: return "Q4_K";
    case WeightType::kQ5_K: return "Q5_K";
    case WeightType::kQ6_K: return "Q6_K";
  }
  return "?";
}

using Clock = std::chrono::steady_clock;

}  // namespace

struct Model::Impl {
  struct Layer {
    std::vector<float> attn_norm;
    std::vector<float> ffn_norm;
    std::unique_ptr<Linear> qkv;      // [q | k | v]
    std::unique_ptr<Linear> o;
    std::unique_ptr<Linear> gate_up;  // [gate | up]
    std::unique_ptr<Linear> down;
  };

  ModelOptions options;
  std::unique_ptr<GgufFile> file;  // owns the mapping the embedding view points into
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<std::string> chat_template;

  WeightView embedding;  // token_embd.weight, looked up row by row
  std::vector<Layer> layers;
  std::vector<float> output_norm;
  std::unique_ptr<Linear> lm_head;
  int64_t weight_bytes = 0;
  std::string weight_type_name;
  std::string kernel_summary;

  // Shapes.
  int d = 0;        // d_model
  int n_heads = 0;
  int n_kv = 0;
  int head_dim = 0;
  int q_dim = 0;    // n_heads * head_dim
  int kv_dim = 0;   // n_kv * head_dim
  int qkv_dim = 0;
  int ffn = 0;
  int rope_dim = 0;
  float attn_scale = 1.0f;

  // Scratch for max_batch_tokens rows (allocated once at load).
  std::vector<float> hidden, normed, qkv, q, k, attn_out, proj, gate_up, ffn_out;
  std::vector<int32_t> positions;
  std::vector<TokenId> tokens;
  std::vector<int64_t> slots;
  std::vector<int32_t> logit_rows;
  std::vector<int32_t> logit_positions;
  std::vector<kernels::AttentionSequence> attn_seqs;
  std::vector<kernels::AttentionSequence> last_seqs;  // last layer: logit rows only

  ModelProfile profile;
  bool profiling = false;

  absl::Status ValidateBatch(absl::Span<const BatchEntry> batch, const KvCache& cache) const;
  void Forward(absl::Span<const BatchEntry> batch, KvCache& cache, float* logits);
};

namespace {

// Adds the elapsed time since `start` to `slot` when profiling, and restarts the clock.
inline void Lap(bool on, Clock::time_point* start, double* slot) {
  if (!on) return;
  Clock::time_point now = Clock::now();
  *slot += std::chrono::duration<double>(now - *start).count();
  *start = now;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const ModelOptions& options) {
  if (options.max_batch_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens must be positive, got ", options.max_batch_tokens));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  QUILL_ASSIGN_OR_RETURN(impl->file, GgufFile::Open(options.path));
  const GgufFile& file = *impl->file;
  QUILL_ASSIGN_OR_RETURN(impl->config, ModelConfig::FromGguf(file));
  const ModelConfig& c = impl->config;
  QUILL_RETURN_IF_ERROR(c.Validate());
  QUILL_ASSIGN_OR_RETURN(impl->tokenizer, Tokenizer::FromGguf(file));
  // Kept as text for the chat layer, which parses it: a bad template (or a value that is
  // not a string) must not stop raw prompts from working.
  if (absl::StatusOr<std::string> t = file.GetString("tokenizer.chat_template"); t.ok()) {
    impl->chat_template = *std::move(t);
  }
  if (impl->tokenizer->vocab_size() > c.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer has ", impl->tokenizer->vocab_size(),
                     " tokens but token_embd.weight only ", c.vocab_size, " rows"));
  }

  Impl& m = *impl;
  m.d = static_cast<int>(c.embedding_length);
  m.n_heads = static_cast<int>(c.head_count);
  m.n_kv = static_cast<int>(c.head_count_kv);
  m.head_dim = static_cast<int>(c.head_dim);
  m.q_dim = m.n_heads * m.head_dim;
  m.kv_dim = m.n_kv * m.head_dim;
  m.qkv_dim = m.q_dim + 2 * m.kv_dim;
  m.ffn = static_cast<int>(c.feed_forward_length);
  m.rope_dim = static_cast<int>(c.rope_dimension_count > 0 ? c.rope_dimension_count : c.head_dim);
  if (m.rope_dim > m.head_dim || m.rope_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rope dimension ", m.rope_dim,
                                                   " must be even and <= head_dim ", m.head_dim));
  }
  m.attn_scale = 1.0f / std::sqrt(static_cast<float>(m.head_dim));
  if (file.FindTensor("blk.0.attn_q.bias") != nullptr) {
    return absl::InvalidArgumentError("tensor 'blk.0.attn_q.bias': attention biases are not supported");
  }

  const int max_tokens = options.max_batch_tokens;
  const kernels::Precision precision = options.precision;
  std::set<std::string> type_names;
  std::set<std::string> kernel_names;
  auto make_linear = [&](std::initializer_list<WeightView> parts,
                         const std::string& what) -> absl::StatusOr<std::unique_ptr<Linear>> {
    for (const WeightView& p : parts) type_names.insert(WeightTypeName(p.type));
    auto linear = Linear::Create(absl::MakeConstSpan(parts.begin(), parts.size()), precision,
                                 max_tokens);
    if (!linear.ok()) {
      return absl::Status(linear.status().code(),
                          absl::StrCat(what, ": ", linear.status().message()));
    }
    m.weight_bytes += (*linear)->packed_bytes();
    kernel_names.insert((*linear)->kernel_name());
    return linear;
  };

  // Embedding table: any type DequantizeRow understands.
  QUILL_ASSIGN_OR_RETURN(m.embedding, BindMatrix(file, "token_embd.weight", c.vocab_size, c.embedding_length));

  m.layers.resize(c.block_count);
  for (int64_t l = 0; l < c.block_count; ++l) {
    Impl::Layer& layer = m.layers[l];
    const std::string p = absl::StrCat("blk.", l, ".");
    QUILL_ASSIGN_OR_RETURN(layer.attn_norm, BindNorm(file, p + "attn_norm.weight", m.d));
    QUILL_ASSIGN_OR_RETURN(layer.ffn_norm, BindNorm(file, p + "ffn_norm.weight", m.d));
    QUILL_ASSIGN_OR_RETURN(WeightView wq, BindMatrix(file, p + "attn_q.weight", m.q_dim, m.d));
    QUILL_ASSIGN_OR_RETURN(WeightView wk, BindMatrix(file, p + "attn_k.weight", m.kv_dim, m.d));
    QUILL_ASSIGN_OR_RETURN(WeightView wv, BindMatrix(file, p + "attn_v.weight", m.kv_dim, m.d));
    QUILL_ASSIGN_OR_RETURN(WeightView wo, BindMatrix(file, p + "attn_output.weight", m.d, m.q_dim));
    QUILL_ASSIGN_OR_RETURN(WeightView wg, BindMatrix(file, p + "ffn_gate.weight", m.ffn, m.d));
    QUILL_ASSIGN_OR_RETURN(WeightView wu, BindMatrix(file, p + "ffn_up.weight", m.ffn, m.d));
    QUILL_ASSIGN_OR_RETURN(WeightView wd, BindMatrix(file, p + "ffn_down.weight", m.d, m.ffn));
    QUILL_ASSIGN_OR_RETURN(layer.qkv, make_linear({wq, wk, wv}, p + "attn_q|k|v"));
    QUILL_ASSIGN_OR_RETURN(layer.o, make_linear({wo}, p + "attn_output"));
    QUILL_ASSIGN_OR_RETURN(layer.gate_up, make_linear({wg, wu}, p + "ffn_gate|up"));
    QUILL_ASSIGN_OR_RETURN(layer.down, make_linear({wd}, p + "ffn_down"));
    m.weight_bytes += 2 * m.d * static_cast<int64_t>(sizeof(float));
  }
  QUILL_ASSIGN_OR_RETURN(m.output_norm, BindNorm(file, "output_norm.weight", m.d));
  m.weight_bytes += m.d * static_cast<int64_t>(sizeof(float));
  const std::string main_types = absl::StrJoin(type_names, "+");
  std::string head_kernels;
  {
    std::set<std::string> body_kernels = kernel_names;
    kernel_names.clear();
    const bool tied = file.FindTensor("output.weight") == nullptr;
    const std::string head_name = tied ? "token_embd.weight" : "output.weight";
    QUILL_ASSIGN_OR_RETURN(WeightView wout, BindMatrix(file, head_name, c.vocab_size, m.d));
    QUILL_ASSIGN_OR_RETURN(m.lm_head, make_linear({wout}, head_name + " (LM head)"));
    m.kernel_summary = absl::StrCat("layers: ", absl::StrJoin(body_kernels, ", "),
                                    "; lm_head", tied ? " (tied)" : "", ": ",
                                    absl::StrJoin(kernel_names, ", "));
  }
  m.weight_type_name = main_types;
  // Every Linear holds its own copy of its weights, so the file's pages are only needed for
  // the embedding rows a batch looks up: drop them (RSS ~ the packed weights, not the file too).
  file.ReleaseResidentPages();

  // Scratch for max_tokens rows.
  const size_t T = static_cast<size_t>(max_tokens);
  m.hidden.assign(T * m.d, 0.0f);
  m.normed.assign(T * m.d, 0.0f);
  m.qkv.assign(T * m.qkv_dim, 0.0f);
  m.q.assign(T * m.q_dim, 0.0f);
  m.k.assign(T * m.kv_dim, 0.0f);
  m.attn_out.assign(T * m.q_dim, 0.0f);
  m.proj.assign(T * m.d, 0.0f);
  m.gate_up.assign(T * 2 * m.ffn, 0.0f);
  m.ffn_out.assign(T * m.ffn, 0.0f);
  m.positions.assign(T, 0);
  m.tokens.assign(T, 0);
  m.slots.assign(T, 0);
  m.logit_rows.assign(T, 0);
  m.logit_positions.assign(T, 0);
  m.attn_seqs.resize(T);
  m.last_seqs.resize(T);
  m.profile.Reset(static_cast<int>(c.block_count));
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->config; }
const Tokenizer& Model::tokenizer() const { return *impl_->tokenizer; }
const ModelOptions& Model::options() const { return impl_->options; }
const std::optional<std::string>& Model::chat_template() const { return impl_->chat_template; }
int64_t Model::weight_bytes() const { return impl_->weight_bytes; }
std::string Model::weight_type_name() const { return impl_->weight_type_name; }
std::string Model::kernel_summary() const { return impl_->kernel_summary; }

KvCacheOptions Model::MakeKvCacheOptions(int64_t budget_bytes, int block_size_tokens) const {
  KvCacheOptions o;
  o.num_layers = static_cast<int>(impl_->config.block_count);
  o.num_kv_heads = impl_->n_kv;
  o.head_dim = impl_->head_dim;
  o.block_size_tokens = block_size_tokens;
  o.budget_bytes = budget_bytes;
  return o;
}

void Model::SetProfiling(bool on) {
  impl_->profiling = on;
  impl_->profile.Reset(static_cast<int>(impl_->config.block_count));
}
const ModelProfile& Model::profile() const { return impl_->profile; }

absl::Status Model::Impl::ValidateBatch(absl::Span<const BatchEntry> batch,
                                        const KvCache& cache) const {
  if (batch.empty()) return absl::InvalidArgumentError("empty batch");
  const kernels::KvLayout& layout = cache.layout();
  if (layout.num_kv_heads != n_kv || layout.head_dim != head_dim) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV cache shape (", layout.num_kv_heads, " kv heads x ", layout.head_dim,
        ") does not match the model (", n_kv, " x ", head_dim, ")"));
  }
  int64_t total = 0;
  for (const BatchEntry& e : batch) total += static_cast<int64_t>(e.tokens.size());
  if (total > options.max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("batch has ", total,
                                                   " tokens, more than max_batch_tokens ",
                                                   options.max_batch_tokens));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchEntry& e = batch[i];
    const int64_t n = static_cast<int64_t>(e.tokens.size());
    if (n == 0) return absl::InvalidArgumentError(absl::StrCat("batch entry ", i, " has no tokens"));
    if (e.first_pos < 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch entry ", i, ": negative first_pos ", e.first_pos));
    }
    if (e.first_pos + n > config.context_length) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch entry ", i, ": positions up to ", e.first_pos + n, " exceed the context length ",
          config.context_length));
    }
    for (int64_t j = 0; j < n; ++j) {
      if (e.tokens[j] < 0 || e.tokens[j] >= config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("batch entry ", i, ": token id ", e.tokens[j],
                                                       " outside the vocabulary [0, ",
                                                       config.vocab_size, ")"));
      }
    }
    if (!cache.Contains(e.seq)) {
      return absl::FailedPreconditionError(
          absl::StrCat("batch entry ", i, ": sequence ", e.seq, " has no KV cache blocks"));
    }
    if (cache.capacity_tokens(e.seq) < e.first_pos + n) {
      return absl::FailedPreconditionError(absl::StrCat(
          "batch entry ", i, ": sequence ", e.seq, " has KV capacity ", cache.capacity_tokens(e.seq),
          " < ", e.first_pos + n, " tokens"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (batch[j].seq == e.seq) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", e.seq, " appears twice in the batch"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Model::Forward(absl::Span<const BatchEntry> batch, KvCache& cache, float* logits) {
  QUILL_RETURN_IF_ERROR(impl_->ValidateBatch(batch, cache));
  bool wants = false;
  for (const BatchEntry& e : batch) wants = wants || e.want_logits;
  if (wants && logits == nullptr) {
    return absl::InvalidArgumentError("logits requested but the output buffer is null");
  }
  impl_->Forward(batch, cache, logits);
  return absl::OkStatus();
}

void Model::Impl::Forward(absl::Span<const BatchEntry> batch, KvCache& cache, float* logits) {
  const bool prof = profiling;
  Clock::time_point t0 = prof ? Clock::now() : Clock::time_point();
  Clock::time_point start = t0;

  // Flatten the batch: one row per token.
  int T = 0;
  int n_logits = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchEntry& e = batch[i];
    const int n = static_cast<int>(e.tokens.size());
    absl::Span<const int32_t> table = cache.block_table(e.seq);
    attn_seqs[i] = {table.data(), T, n, e.first_pos};
    for (int j = 0; j < n; ++j) {
      tokens[T + j] = e.tokens[j];
      positions[T + j] = e.first_pos + j;
      slots[T + j] = cache.SlotOffset(e.seq, e.first_pos + j);
    }
    if (e.want_logits) {
      last_seqs[n_logits] = {table.data(), n_logits, 1, e.first_pos + n - 1};
      logit_rows[n_logits++] = T + n - 1;
    }
    T += n;
  }
  const auto seqs = absl::MakeConstSpan(attn_seqs.data(), batch.size());
  const auto lseqs = absl::MakeConstSpan(last_seqs.data(), n_logits);

  // Embeddings.
#pragma omp parallel for schedule(static) if (T >= 16)
  for (int t = 0; t < T; ++t) {
    kernels::DequantizeRow(embedding, tokens[t], hidden.data() + static_cast<size_t>(t) * d);
  }
  Lap(prof, &start, &profile.embed);

  const int L = static_cast<int>(layers.size());
  const float eps = config.rms_norm_eps;
  const float base = config.rope_freq_base;
  for (int l = 0; l < L; ++l) {
    Layer& layer = layers[l];
    ModelProfile::LayerTimes& lt = profile.layers[l];
    const bool last = l == L - 1;

    kernels::RmsNorm(hidden.data(), layer.attn_norm.data(), T, d, eps, normed.data());
    Lap(prof, &start, &lt.norm);
    layer.qkv->Run(normed.data(), T, qkv.data());
    Lap(prof, &start, &lt.qkv);

    // Split q and k out of the fused rows (RoPE and attention want dense rows), rotate
    // them, and store k and v in the cache. In the last layer only the rows that produce
    // logits need their query.
    float* kc = cache.k_data(l);
    float* vc = cache.v_data(l);
    const int q_rows = last ? n_logits : T;
#pragma omp parallel for schedule(static) if (T >= 64)
    for (int t = 0; t < T; ++t) {
      const float* row = qkv.data() + static_cast<size_t>(t) * qkv_dim;
      std::memcpy(k.data() + static_cast<size_t>(t) * kv_dim, row + q_dim, kv_dim * sizeof(float));
      std::memcpy(vc + slots[t], row + q_dim + kv_dim, kv_dim * sizeof(float));
    }
    for (int r = 0; r < q_rows; ++r) {
      const int t = last ? logit_rows[r] : r;
      std::memcpy(q.data() + static_cast<size_t>(r) * q_dim,
                  qkv.data() + static_cast<size_t>(t) * qkv_dim, q_dim * sizeof(float));
    }
    kernels::Rope(k.data(), positions.data(), T, n_kv, head_dim, rope_dim, base);
    for (int t = 0; t < T; ++t) {
      std::memcpy(kc + slots[t], k.data() + static_cast<size_t>(t) * kv_dim, kv_dim * sizeof(float));
    }
    if (last) {
      if (n_logits == 0) break;
      for (int r = 0; r < n_logits; ++r) logit_positions[r] = positions[logit_rows[r]];
      kernels::Rope(q.data(), logit_positions.data(), n_logits, n_heads, head_dim, rope_dim, base);
    } else {
      kernels::Rope(q.data(), positions.data(), T, n_heads, head_dim, rope_dim, base);
    }
    Lap(prof, &start, &lt.rope_kv);

    kernels::PagedAttention(q.data(), kc, vc, cache.layout(), last ? lseqs : seqs, n_heads,
                            attn_scale, attn_out.data());
    Lap(prof, &start, &lt.attention);

    // In the last layer the rest only matters for the logit rows: compact them.
    int rows = T;
    if (last) {
      rows = n_logits;
      for (int r = 0; r < n_logits; ++r) {
        if (logit_rows[r] != r) {
          std::memcpy(hidden.data() + static_cast<size_t>(r) * d,
                      hidden.data() + static_cast<size_t>(logit_rows[r]) * d, d * sizeof(float));
        }
      }
    }
    layer.o->Run(attn_out.data(), rows, proj.data());
    Lap(prof, &start, &lt.o);
    kernels::AddInPlace(hidden.data(), proj.data(), static_cast<int64_t>(rows) * d);
    kernels::RmsNorm(hidden.data(), layer.ffn_norm.data(), rows, d, eps, normed.data());
    Lap(prof, &start, &lt.norm);
    layer.gate_up->Run(normed.data(), rows, gate_up.data());
    Lap(prof, &start, &lt.gate_up);
    kernels::SwiGlu(gate_up.data(), rows, ffn, ffn_out.data());
    Lap(prof, &start, &lt.swiglu);
    layer.down->Run(ffn_out.data(), rows, proj.data());
    Lap(prof, &start, &lt.down);
    kernels::AddInPlace(hidden.data(), proj.data(), static_cast<int64_t>(rows) * d);
    Lap(prof, &start, &lt.norm);
  }

  if (n_logits > 0) {
    // After the last layer the logit rows are the first n_logits rows of `hidden`.
    kernels::RmsNorm(hidden.data(), output_norm.data(), n_logits, d, eps, normed.data());
    lm_head->Run(normed.data(), n_logits, logits);
    Lap(prof, &start, &profile.lm_head);
  }
  if (prof) {
    profile.total += std::chrono::duration<double>(Clock::now() - t0).count();
    profile.steps += 1;
    profile.tokens += T;
  }
}

}  // namespace quill::engine
