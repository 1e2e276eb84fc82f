// The loader: binds every tensor the decoder description calls for, checks its name, shape
// and type, and packs the matmul weights once for the chosen precision.
#include "engine/model/model_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"
#include "engine/gguf/ggml_types.h"
#include "engine/quant/block_layout.h"

namespace quill::engine {
namespace {

using kernels::Linear;
using kernels::WeightType;
using kernels::WeightView;

// ---- Weight types ------------------------------------------------------------------------
// The GGUF types the matmul kernels accept, and their kernel-side names.

bool ToWeightType(GgmlType type, WeightType* out) {
  switch (type) {
    case GgmlType::kF32:
      *out = WeightType::kF32;
      return true;
    case GgmlType::kF16:
      *out = WeightType::kF16;
      return true;
    case GgmlType::kBF16:
      *out = WeightType::kBF16;
      return true;
    case GgmlType::kQ8_0:
      *out = WeightType::kQ8_0;
      return true;
    case GgmlType::kQ4_0:
      *out = WeightType::kQ4_0;
      return true;
    case GgmlType::kQ4_1:
      *out = WeightType::kQ4_1;
      return true;
    case GgmlType::kQ5_0:
      *out = WeightType::kQ5_0;
      return true;
    case GgmlType::kQ5_1:
      *out = WeightType::kQ5_1;
      return true;
    case GgmlType::kQ4_K:
      *out = WeightType::kQ4_K;
      return true;
    case GgmlType::kQ5_K:
      *out = WeightType::kQ5_K;
      return true;
    case GgmlType::kQ6_K:
      *out = WeightType::kQ6_K;
      return true;
    default:
      return false;
  }
}

// A 2-D weight `name` with `rows` outputs of `cols` inputs (GGUF dims {cols, rows}).
absl::StatusOr<WeightView> BindMatrix(const GgufFile& file, const std::string& name, int64_t rows,
                                      int64_t cols) {
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
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape [",
                                                   absl::StrJoin(t->dims, ", "), "], expected [",
                                                   cols, ", ", rows, "]"));
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

const char* WeightTypeName(WeightType t) {
  switch (t) {
    case WeightType::kF32:
      return "F32";
    case WeightType::kF16:
      return "F16";
    case WeightType::kBF16:
      return "BF16";
    case WeightType::kQ8_0:
      return "Q8_0";
    case WeightType::kQ4_0:
      return "Q4_0";
    case WeightType::kQ4_1:
      return "Q4_1";
    case WeightType::kQ5_0:
      return "Q5_0";
    case WeightType::kQ5_1:
      return "Q5_1";
    case WeightType::kQ4_K:
      return "Q4_K";
    case WeightType::kQ5_K:
      return "Q5_K";
    case WeightType::kQ6_K:
      return "Q6_K";
  }
  return "?";
}

// ---- Vectors (norms, biases, factors) ----------------------------------------------------

// A 1-D tensor of `n` elements, widened exactly to f32.
absl::StatusOr<std::vector<float>> BindVector(const GgufFile& file, const std::string& name,
                                              int64_t n) {
  const GgufTensorInfo* t = file.FindTensor(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("missing tensor '", name, "' in ", file.path()));
  }
  if (t->num_elements != n || t->dims.empty() || t->dims[0] != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' has shape [", absl::StrJoin(t->dims, ", "), "], expected [", n, "]"));
  }
  std::vector<float> out(n);
  switch (t->type) {
    case GgmlType::kF32:
      std::memcpy(out.data(), t->data, n * sizeof(float));
      break;
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);
        out[i] = t->type == GgmlType::kF16 ? kernels::Fp16ToFloat(h) : kernels::Bf16ToFloat(h);
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has unsupported type ",
                                                     GgmlTypeName(t->type),
                                                     " (supported: F32, F16, BF16)"));
  }
  return out;
}

// Binds tensors by name, remembers which ones it used, and packs matmul weights.
class Binder {
 public:
  Binder(const GgufFile& file, kernels::Precision precision, int max_tokens, ModelWeights* w)
      : file_(file), precision_(precision), max_tokens_(max_tokens), w_(w) {}

  absl::StatusOr<WeightView> Matrix(const std::string& name, int64_t rows, int64_t cols) {
    used_.insert(name);
    QUILL_ASSIGN_OR_RETURN(WeightView view, BindMatrix(file_, name, rows, cols));
    tensor_of_[view.data] = file_.FindTensor(name);
    return view;
  }

  absl::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t n) {
    used_.insert(name);
    QUILL_ASSIGN_OR_RETURN(std::vector<float> v, BindVector(file_, name, n));
    w_->bytes += n * static_cast<int64_t>(sizeof(float));
    return v;
  }

  // The bias tensors `names` (each `sizes[i]` long) side by side, as a fused matmul's
  // output puts them.
  absl::StatusOr<std::vector<float>> Concat(
      std::initializer_list<std::pair<std::string, int64_t>> parts) {
    std::vector<float> out;
    for (const auto& [name, n] : parts) {
      QUILL_ASSIGN_OR_RETURN(std::vector<float> v, Vector(name, n));
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }

  // One Linear over `parts` side by side. `what` names them in errors.
  absl::StatusOr<std::unique_ptr<Linear>> Pack(std::initializer_list<WeightView> parts,
                                               const std::string& what) {
    for (const WeightView& p : parts) types_.insert(WeightTypeName(p.type));
    auto linear = Linear::Create(absl::MakeConstSpan(parts.begin(), parts.size()), precision_,
                                 max_tokens_, w_->linear_scratch);
    if (!linear.ok()) {
      return absl::Status(linear.status().code(),
                          absl::StrCat(what, ": ", linear.status().message()));
    }
    w_->bytes += (*linear)->packed_bytes();
    // Packed: the file's copy need not stay resident (the load's peak is one copy + a part).
    for (const WeightView& p : parts) {
      if (auto it = tensor_of_.find(p.data); it != tensor_of_.end()) {
        file_.ReleaseResidentPages(*it->second);
      }
    }
    kernels_.insert((*linear)->kernel_name());
    return linear;
  }

  // The types and kernels seen so far, and a fresh start for the next group.
  std::string TakeTypes() { return Take(&types_, "+"); }
  std::string TakeKernels() { return Take(&kernels_, ", "); }

  // Every tensor of the file must have been bound: an unused one means the file describes
  // something this architecture's description does not (e.g. biases a family lacks).
  absl::Status CheckAllUsed(const std::string& architecture) const {
    for (const GgufTensorInfo& t : file_.tensors()) {
      if (used_.count(t.name) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' is not used by architecture '", architecture, "'"));
      }
    }
    return absl::OkStatus();
  }

 private:
  static std::string Take(std::set<std::string>* names, const char* separator) {
    std::string joined = absl::StrJoin(*names, separator);
    names->clear();
    return joined;
  }

  const GgufFile& file_;
  const kernels::Precision precision_;
  const int max_tokens_;
  ModelWeights* w_;
  std::set<std::string> used_;
  std::map<const void*, const GgufTensorInfo*> tensor_of_;  // bound matrices, by data
  std::set<std::string> types_;
  std::set<std::string> kernels_;
};

absl::StatusOr<LayerWeights> LoadLayer(Binder& b, const ModelConfig& c, int64_t l) {
  const DecoderDescription& dd = c.decoder;
  const int64_t d = c.embedding_length;
  const int64_t q_dim = c.head_count * c.head_dim;
  const int64_t kv_dim = c.head_count_kv * c.head_dim;
  const int64_t ffn = c.feed_forward_length;
  const std::string p = absl::StrCat("blk.", l, ".");
  LayerWeights w;

  QUILL_ASSIGN_OR_RETURN(w.attn_norm, b.Vector(p + "attn_norm.weight", d));
  if (dd.has_norm_bias()) {
    QUILL_ASSIGN_OR_RETURN(w.attn_norm_bias, b.Vector(p + "attn_norm.bias", d));
  }
  if (dd.fused_qkv) {
    QUILL_ASSIGN_OR_RETURN(WeightView wqkv, b.Matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, d));
    QUILL_ASSIGN_OR_RETURN(w.qkv, b.Pack({wqkv}, p + "attn_qkv"));
    if (dd.qkv_bias) {
      QUILL_ASSIGN_OR_RETURN(w.qkv_bias, b.Vector(p + "attn_qkv.bias", q_dim + 2 * kv_dim));
    }
  } else {
    QUILL_ASSIGN_OR_RETURN(WeightView wq, b.Matrix(p + "attn_q.weight", q_dim, d));
    QUILL_ASSIGN_OR_RETURN(WeightView wk, b.Matrix(p + "attn_k.weight", kv_dim, d));
    QUILL_ASSIGN_OR_RETURN(WeightView wv, b.Matrix(p + "attn_v.weight", kv_dim, d));
    QUILL_ASSIGN_OR_RETURN(w.qkv, b.Pack({wq, wk, wv}, p + "attn_q|k|v"));
    if (dd.qkv_bias) {
      QUILL_ASSIGN_OR_RETURN(w.qkv_bias, b.Concat({{p + "attn_q.bias", q_dim},
                                                   {p + "attn_k.bias", kv_dim},
                                                   {p + "attn_v.bias", kv_dim}}));
    }
  }
  QUILL_ASSIGN_OR_RETURN(WeightView wo, b.Matrix(p + "attn_output.weight", d, q_dim));
  QUILL_ASSIGN_OR_RETURN(w.o, b.Pack({wo}, p + "attn_output"));
  if (dd.attn_output_bias) {
    QUILL_ASSIGN_OR_RETURN(w.o_bias, b.Vector(p + "attn_output.bias", d));
  }
  if (dd.post_attention_norm) {
    QUILL_ASSIGN_OR_RETURN(w.post_attn_norm, b.Vector(p + "post_attention_norm.weight", d));
  }

  QUILL_ASSIGN_OR_RETURN(w.ffn_norm, b.Vector(p + "ffn_norm.weight", d));
  if (dd.has_norm_bias()) {
    QUILL_ASSIGN_OR_RETURN(w.ffn_norm_bias, b.Vector(p + "ffn_norm.bias", d));
  }
  QUILL_ASSIGN_OR_RETURN(WeightView wu, b.Matrix(p + "ffn_up.weight", ffn, d));
  if (dd.gated_ffn()) {
    QUILL_ASSIGN_OR_RETURN(WeightView wg, b.Matrix(p + "ffn_gate.weight", ffn, d));
    QUILL_ASSIGN_OR_RETURN(w.up, b.Pack({wg, wu}, p + "ffn_gate|up"));
    if (dd.ffn_bias) {
      QUILL_ASSIGN_OR_RETURN(w.up_bias,
                             b.Concat({{p + "ffn_gate.bias", ffn}, {p + "ffn_up.bias", ffn}}));
    }
  } else {
    QUILL_ASSIGN_OR_RETURN(w.up, b.Pack({wu}, p + "ffn_up"));
    if (dd.ffn_bias) {
      QUILL_ASSIGN_OR_RETURN(w.up_bias, b.Vector(p + "ffn_up.bias", ffn));
    }
  }
  QUILL_ASSIGN_OR_RETURN(WeightView wd, b.Matrix(p + "ffn_down.weight", d, ffn));
  QUILL_ASSIGN_OR_RETURN(w.down, b.Pack({wd}, p + "ffn_down"));
  if (dd.ffn_bias) {
    QUILL_ASSIGN_OR_RETURN(w.down_bias, b.Vector(p + "ffn_down.bias", d));
  }
  if (dd.post_ffn_norm) {
    QUILL_ASSIGN_OR_RETURN(w.post_ffn_norm, b.Vector(p + "post_ffw_norm.weight", d));
  }
  w.window = static_cast<int32_t>(dd.WindowOfLayer(l));
  return w;
}

}  // namespace

absl::StatusOr<ModelWeights> LoadWeights(
    const GgufFile& file, const ModelConfig& c, kernels::Precision precision, int max_tokens,
    const std::function<void(int64_t layers_done, int64_t bytes)>& layer_packed) {
  const DecoderDescription& dd = c.decoder;
  const int64_t d = c.embedding_length;
  ModelWeights w;
  w.linear_scratch = std::make_shared<kernels::LinearScratch>();
  Binder b(file, precision, max_tokens, &w);

  // Embeddings: any type DequantizeRow understands, read in place.
  QUILL_ASSIGN_OR_RETURN(w.token_embedding, b.Matrix("token_embd.weight", c.vocab_size, d));
  w.mapped_bytes = static_cast<int64_t>(file.FindTensor("token_embd.weight")->size_bytes);
  if (dd.positions == PositionKind::kLearned) {
    QUILL_ASSIGN_OR_RETURN(WeightView pos, b.Matrix("position_embd.weight", c.context_length, d));
    w.position_embedding.resize(static_cast<size_t>(c.context_length * d));
    for (int64_t r = 0; r < c.context_length; ++r) {
      kernels::DequantizeRow(pos, r, w.position_embedding.data() + r * d);
    }
    w.bytes += c.context_length * d * static_cast<int64_t>(sizeof(float));
  }
  if (dd.rope_freq_factors) {
    QUILL_ASSIGN_OR_RETURN(w.rope_freq_factors,
                           b.Vector("rope_freqs.weight", c.rope_dimension_count / 2));
    for (float f : w.rope_freq_factors) {
      if (!std::isfinite(f) || f <= 0.0f) {
        return absl::InvalidArgumentError(absl::StrCat("tensor 'rope_freqs.weight' holds ", f,
                                                       "; factors must be finite and > 0"));
      }
    }
  }

  w.layers.reserve(c.block_count);
  for (int64_t l = 0; l < c.block_count; ++l) {
    QUILL_ASSIGN_OR_RETURN(LayerWeights layer, LoadLayer(b, c, l));
    for (const kernels::Linear* lin :
         {layer.qkv.get(), layer.o.get(), layer.up.get(), layer.down.get()}) {
      w.row_multiple = std::max(w.row_multiple, lin->row_multiple());
      w.blocked_from_rows = std::max(w.blocked_from_rows, lin->blocked_from_rows());
    }
    w.layers.push_back(std::move(layer));
    if (layer_packed) layer_packed(l + 1, w.bytes);
  }
  QUILL_ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight", d));
  if (dd.has_norm_bias()) {
    QUILL_ASSIGN_OR_RETURN(w.output_norm_bias, b.Vector("output_norm.bias", d));
  }
  w.type_name = b.TakeTypes();
  const std::string body_kernels = b.TakeKernels();

  const std::string head_name = c.tied_embeddings ? "token_embd.weight" : "output.weight";
  QUILL_ASSIGN_OR_RETURN(WeightView head, b.Matrix(head_name, c.vocab_size, d));
  QUILL_ASSIGN_OR_RETURN(w.lm_head, b.Pack({head}, head_name + " (LM head)"));
  w.kernel_summary = absl::StrCat("layers: ", body_kernels, "; lm_head",
                                  c.tied_embeddings ? " (tied)" : "", ": ", b.TakeKernels());
  QUILL_RETURN_IF_ERROR(b.CheckAllUsed(c.architecture));
  return w;
}

}  // namespace quill::engine
