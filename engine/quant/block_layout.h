#pragma once

#include <cstdint>

#include "engine/quant/quant_type.h"

namespace quill::engine::quant {

// Where the fields of one block sit (byte offsets into the block; -1 when absent).
struct BlockFields {
  int d = -1;       // fp16 scale
  int m = -1;       // fp16 min (Q4_1, Q5_1) or dmin (Q4_K, Q5_K)
  int scales = -1;  // sub-block scales: 12 bytes of 6-bit pairs (Q4_K, Q5_K), 16 int8 (Q6_K)
};
BlockFields FieldsOf(QuantType type);

// The stored (unsigned) quantized values of one block, in element order: Q4_*: 0..15,
// Q5_*: 0..31, Q6_K: 0..63, Q8_0: the int8 value + 128 (0..255).
void UnpackQuants(QuantType type, const uint8_t* block, uint8_t* q);
// The inverse: writes the quantized-value bytes of `block` (header fields untouched).
// Values must be in the type's range.
void PackQuants(QuantType type, const uint8_t* q, uint8_t* block);

// Sub-block j (0..7) of a Q4_K/Q5_K block: its 6-bit scale and min from the 12 packed bytes.
void UnpackScaleMin(const uint8_t* scales12, int j, uint8_t* scale, uint8_t* min);
// Packs 8 (scale, min) pairs of 6 bits into 12 bytes.
void PackScaleMins(const uint8_t* scales, const uint8_t* mins, uint8_t* scales12);

// Index of the first of `blocks` blocks whose fp16 d (or m / dmin) is NaN or infinite, or -1.
int64_t FindNonFiniteScale(QuantType type, const uint8_t* data, int64_t blocks);

inline uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline void StoreU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

}  // namespace quill::engine::quant
