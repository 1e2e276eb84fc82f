#pragma once

#include "engine/runtime/request.h"

namespace quill::engine {

// Engine -> frontend. Implemented by the server's per-RPC stream channel (and by test
// recorders). Both calls come from the engine thread and must not block.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // New output. Returns false once the consumer is gone; the engine then cancels the
  // request (its KV blocks return to the pool within the step).
  virtual bool OnChunk(TokenChunk chunk) = 0;
  // Exactly once per accepted request, after its last OnChunk.
  virtual void OnFinish(const FinishInfo& info) = 0;
};

}  // namespace quill::engine
