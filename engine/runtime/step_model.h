#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {

// What the engine needs from a model. The production implementation wraps `Model`
// (engine_model.cc); tests can substitute a scripted fake to drive the engine loop
// without weights.
class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual int vocab_size() const = 0;
  virtual int context_length() const = 0;
  virtual int max_batch_tokens() const = 0;  // most tokens one Forward() accepts
  virtual KvCacheOptions MakeKvCacheOptions(int64_t budget_bytes,
                                            int block_size_tokens) const = 0;
  // Same contract as Model::Forward.
  virtual absl::Status Forward(absl::Span<const BatchEntry> batch, KvCache& cache,
                               float* logits) = 0;
  // Steps of about `tokens` tokens are the cheapest per token at a multiple of this
  // (Model::step_token_multiple()).
  virtual int step_token_multiple(int /*tokens*/) const { return 1; }
  // The wrapped Model, or null for a fake.
  virtual const Model* model() const { return nullptr; }
};

// The production StepModel: forwards to `model` (engine_model.cc, in quill::runtime).
std::unique_ptr<StepModel> MakeModelStepModel(std::unique_ptr<Model> model);

}  // namespace quill::engine
