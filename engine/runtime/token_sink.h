#pragma once

#include "engine/runtime/request.h"

namespace quill::engine {

// Engine -> frontend. Implemented by the server's per-RPC stream channel (and by test
// recorders). Every call comes from the engine thread and must not block.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // New output. Returns false once the consumer is gone; the engine then cancels the
  // request (its KV blocks return to the pool within the step).
  virtual bool OnChunk(TokenChunk chunk) = 0;
  // Exactly once per accepted request, after its last OnChunk.
  virtual void OnFinish(const FinishInfo& info) = 0;

  // Backpressure. Asked right after every OnChunk that returned true: true means the
  // consumer has fallen behind and the sink holds as much unsent output as it will. The
  // engine then pauses the request (it leaves the batch, its KV stays) until
  // Engine::Resume(request_id). Why a question and a wake-up rather than a blocking
  // OnChunk: the engine thread serves every request and must never wait for one client.
  // A sink that ever answers true must see to it that Resume is called each time it
  // drains after that; a Resume while it is still full (or for a request that is not
  // paused) is harmless, the engine asks again.
  virtual bool WouldBlock() { return false; }
};

}  // namespace quill::engine
