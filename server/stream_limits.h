#pragma once

// What one streaming response may hold unsent for a client that reads slower than the
// engine writes (shared by the gRPC StreamChannel and the HTTP GenerationStream).

namespace quill::server {

// Engine chunks (one token each, with its text and logprobs) a stream holds unsent behind
// the write in flight before the engine pauses its request (engine::TokenSink::WouldBlock).
// Small, so that a client that stops reading costs a few KiB rather than its whole answer
// (README "Memory bounds"); large enough that a reader that is only briefly slower than
// the engine (a GC pause, a busy event loop) does not stall the request: 8 tokens are
// ~0.1-0.5 s of decoding.
inline constexpr int kMaxUnsentChunks = 8;

}  // namespace quill::server
