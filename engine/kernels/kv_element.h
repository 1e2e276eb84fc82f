#pragma once

#include <cstdint>

namespace quill::engine::kernels {

// How the paged KV cache stores a K or V value. Exact mode keeps f32 so that its logits
// stay bit-exact; fast mode stores IEEE f16, which halves both the cache's memory and the
// bytes a long context's decode step reads (at 4,096 keys, attention reads more than the
// weights of a 1B model in Q4).
enum class KvElement : uint8_t { kF32, kF16 };

inline int KvElementBytes(KvElement e) { return e == KvElement::kF16 ? 2 : 4; }
inline const char* KvElementName(KvElement e) { return e == KvElement::kF16 ? "f16" : "f32"; }

// Stores n floats at element `offset` of an arena of `element`s: a copy for f32; for f16
// rounded to nearest even, with values beyond the f16 range saturated to +-65504 (an
// infinity would turn every later softmax over that key into NaN). NaN stays NaN.
void StoreKvRow(const float* row, int64_t n, KvElement element, void* arena, int64_t offset);

// The same conversion, storing value i at element offset + i * stride: a key's column in
// a transposed K block (KvLayout::KeyIndex).
void StoreKvStrided(const float* row, int64_t n, KvElement element, void* arena, int64_t offset,
                    int64_t stride);

}  // namespace quill::engine::kernels
