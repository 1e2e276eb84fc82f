#include "engine/model/model.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/model/forward.h"
#include "engine/model/model_weights.h"

namespace quill::engine {

// Load = config (metadata) + tokenizer + weights (the loader); Forward = ForwardPass.
struct Model::Impl {
  ModelOptions options;
  std::unique_ptr<GgufFile> file;  // owns the mapping the token embedding points into
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<std::string> chat_template;
  ModelWeights weights;
  std::unique_ptr<ForwardPass> forward;  // reads config and weights above
  ModelProfile profile;
  bool profiling = false;
  bool profiling_paused = false;

  absl::Status ValidateBatch(absl::Span<const BatchEntry> batch, const KvCache& cache) const;
};

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const ModelOptions& options) {
  if (options.max_batch_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens must be positive, got ", options.max_batch_tokens));
  }
  const bool exact = options.precision == kernels::Precision::kExact;
  if (exact && options.kv_element.value_or(kernels::KvElement::kF32) != kernels::KvElement::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("exact precision keeps the KV cache in f32, not ",
                     kernels::KvElementName(*options.kv_element)));
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
    return absl::InvalidArgumentError(absl::StrCat("tokenizer has ", impl->tokenizer->vocab_size(),
                                                   " tokens but token_embd.weight only ",
                                                   c.vocab_size, " rows"));
  }
  const auto layer_packed = [&](int64_t layers_done, int64_t bytes) {
    if (options.on_progress) options.on_progress({layers_done, c.block_count, bytes});
  };
  QUILL_ASSIGN_OR_RETURN(impl->weights, LoadWeights(file, c, options.precision,
                                                    options.max_batch_tokens, layer_packed));
  // Every Linear holds its own copy of its weights, so the file's pages are only needed for
  // the embedding rows a batch looks up: drop them (RSS ~ the packed weights, not the file too).
  file.ReleaseResidentPages();
#ifdef __GLIBC__
  // Packing's temporaries (plain row-major copies, widened parts) were freed into malloc's
  // arenas, where they stay resident unless given back: the steady RSS is what is held.
  malloc_trim(0);
#endif
  impl->forward = std::make_unique<ForwardPass>(c, impl->weights, options.max_batch_tokens);
  impl->profile.Reset(static_cast<int>(c.block_count));
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->config; }
const Tokenizer& Model::tokenizer() const { return *impl_->tokenizer; }
const std::optional<std::string>& Model::chat_template() const { return impl_->chat_template; }
const ModelOptions& Model::options() const { return impl_->options; }
int64_t Model::weight_bytes() const { return impl_->weights.bytes; }
int64_t Model::mapped_weight_bytes() const { return impl_->weights.mapped_bytes; }
int64_t Model::scratch_bytes() const { return impl_->weights.linear_scratch->bytes(); }
std::string Model::weight_type_name() const { return impl_->weights.type_name; }
std::string Model::kernel_summary() const { return impl_->weights.kernel_summary; }
int Model::step_token_multiple(int tokens) const {
  const ModelWeights& w = impl_->weights;
  return tokens >= w.blocked_from_rows ? w.row_multiple : 1;
}

kernels::KvElement Model::kv_element() const {
  if (impl_->options.kv_element.has_value()) return *impl_->options.kv_element;
  return impl_->options.precision == kernels::Precision::kExact ? kernels::KvElement::kF32
                                                                : kernels::KvElement::kF16;
}

KvCacheOptions Model::MakeKvCacheOptions(int64_t budget_bytes, int block_size_tokens) const {
  KvCacheOptions o;
  o.num_layers = static_cast<int>(impl_->config.block_count);
  o.num_kv_heads = static_cast<int>(impl_->config.head_count_kv);
  o.head_dim = static_cast<int>(impl_->config.head_dim);
  o.block_size_tokens = block_size_tokens;
  o.element = kv_element();
  o.budget_bytes = budget_bytes;
  return o;
}

void Model::SetProfiling(bool on) {
  impl_->profiling = on;
  impl_->profile.Reset(static_cast<int>(impl_->config.block_count));
}
void Model::PauseProfiling(bool paused) { impl_->profiling_paused = paused; }
const ModelProfile& Model::profile() const { return impl_->profile; }

absl::Status Model::Impl::ValidateBatch(absl::Span<const BatchEntry> batch,
                                        const KvCache& cache) const {
  if (batch.empty()) return absl::InvalidArgumentError("empty batch");
  const kernels::KvLayout& layout = cache.layout();
  if (layout.num_kv_heads != config.head_count_kv || layout.head_dim != config.head_dim) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV cache shape (", layout.num_kv_heads, " kv heads x ", layout.head_dim,
        ") does not match the model (", config.head_count_kv, " x ", config.head_dim, ")"));
  }
  int64_t total = 0;
  for (const BatchEntry& e : batch) total += static_cast<int64_t>(e.tokens.size());
  if (total > options.max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch has ", total, " tokens, more than max_batch_tokens ", options.max_batch_tokens));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchEntry& e = batch[i];
    const int64_t n = static_cast<int64_t>(e.tokens.size());
    if (n == 0)
      return absl::InvalidArgumentError(absl::StrCat("batch entry ", i, " has no tokens"));
    if (e.first_pos < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch entry ", i, ": negative first_pos ", e.first_pos));
    }
    if (e.first_pos + n > config.context_length) {
      return absl::InvalidArgumentError(absl::StrCat("batch entry ", i, ": positions up to ",
                                                     e.first_pos + n, " exceed the context length ",
                                                     config.context_length));
    }
    for (int64_t j = 0; j < n; ++j) {
      if (e.tokens[j] < 0 || e.tokens[j] >= config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("batch entry ", i, ": token id ",
                                                       e.tokens[j], " outside the vocabulary [0, ",
                                                       config.vocab_size, ")"));
      }
    }
    if (e.want_logits && (e.num_logits < 1 || e.num_logits > n)) {
      return absl::InvalidArgumentError(absl::StrCat("batch entry ", i, ": num_logits ",
                                                     e.num_logits, " outside [1, ", n, "]"));
    }
    if (!cache.Contains(e.seq)) {
      return absl::FailedPreconditionError(
          absl::StrCat("batch entry ", i, ": sequence ", e.seq, " has no KV cache blocks"));
    }
    if (cache.capacity_tokens(e.seq) < e.first_pos + n) {
      return absl::FailedPreconditionError(
          absl::StrCat("batch entry ", i, ": sequence ", e.seq, " has KV capacity ",
                       cache.capacity_tokens(e.seq), " < ", e.first_pos + n, " tokens"));
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
  impl_->forward->Run(batch, cache, logits, impl_->profiling && !impl_->profiling_paused,
                      impl_->profile);
  return absl::OkStatus();
}

}  // namespace quill::engine
