#include <memory>
#include <utility>

#include "engine/runtime/engine.h"
#include "engine/runtime/step_model.h"

namespace quill::engine {
namespace {

class ModelStepModel final : public StepModel {
 public:
  explicit ModelStepModel(std::unique_ptr<Model> model) : model_(std::move(model)) {}

  const Tokenizer& tokenizer() const override { return model_->tokenizer(); }
  int vocab_size() const override { return static_cast<int>(model_->config().vocab_size); }
  int context_length() const override {
    return static_cast<int>(model_->config().context_length);
  }
  int max_batch_tokens() const override { return model_->options().max_batch_tokens; }
  KvCacheOptions MakeKvCacheOptions(int64_t budget_bytes, int block_size_tokens) const override {
    return model_->MakeKvCacheOptions(budget_bytes, block_size_tokens);
  }
  absl::Status Forward(absl::Span<const BatchEntry> batch, KvCache& cache,
                       float* logits) override {
    return model_->Forward(batch, cache, logits);
  }
  int step_token_multiple(int tokens) const override { return model_->step_token_multiple(tokens); }
  const Model* model() const override { return model_.get(); }

 private:
  std::unique_ptr<Model> model_;
};

}  // namespace

std::unique_ptr<StepModel> MakeModelStepModel(std::unique_ptr<Model> model) {
  return std::make_unique<ModelStepModel>(std::move(model));
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model,
                                                       const EngineOptions& options,
                                                       EngineObserver* observer,
                                                       std::unique_ptr<Model> draft_model) {
  if (model == nullptr) return absl::InvalidArgumentError("model must not be null");
  return CreateWithStepModel(
      MakeModelStepModel(std::move(model)), options, observer, nullptr,
      draft_model != nullptr ? MakeModelStepModel(std::move(draft_model)) : nullptr);
}

}  // namespace quill::engine
