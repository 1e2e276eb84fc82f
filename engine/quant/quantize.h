#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/quant/quant_type.h"

namespace quill::engine::quant {

// Quantizes blocks * BlockElements(type) values into blocks * BlockBytes(type) bytes with
// the rounding of ggml's reference quantizers (what llama-quantize writes without an
// importance matrix), so that quantizing the dequantized values of a llama-quantize block
// gives that block back:
//   Q4_0/Q5_0: d = the value of largest magnitude / -8 (-16), q = trunc(x / d + 8.5 (16.5));
//   Q4_1/Q5_1: d = (max - min) / 15 (31), m = min, q = trunc((x - min) / d + 0.5);
//   Q8_0:      d = max|x| / 127, q = round(x / d);
//   Q4_K/Q5_K: per sub-block of 32 a weighted least-squares search over scale and min
//              (quantize_kquant.cc), the 8 scales and mins then quantized to 6 bits against
//              the largest, and q recomputed from the stored scales;
//   Q6_K:      per sub-block of 16 an x^2-weighted search over the scale, the 16 scales
//              quantized to int8 against the largest, q recomputed from the stored scales.
// The k-quant searches are not idempotent; when a super-block's values lie exactly on a
// grid of the format (they are dequantized values) and the search's block does not
// reproduce them, an exact encoding is looked for instead (quantize_exact.cc), so that
// re-quantizing a dequantized tensor reproduces its values bit for bit. (Q6_K blocks with no
// level at -32 have two such encodings, mirrored in sign; the one llama-quantize stored is
// not always recoverable from the values.)
// INVALID_ARGUMENT for a NaN or infinite value (naming its index).
absl::Status Quantize(QuantType type, const float* x, int64_t blocks, uint8_t* out);

// Implementation details follow (quantize_kquant.cc).
namespace internal {
void QuantizeBlockQ4K(const float* x, uint8_t* block);
void QuantizeBlockQ5K(const float* x, uint8_t* block);
void QuantizeBlockQ6K(const float* x, uint8_t* block);
// Round to nearest, ties to even (saturating far outside the int range; NaN gives 0).
int NearestInt(float v);
// Replaces `block` (the search's result for super-block x of a k-quant type) by an encoding
// that dequantizes to exactly x when x lies on a grid of the format and `block` does not
// already reproduce it. True if it replaced the block.
bool RepairExact(QuantType type, const float* x, uint8_t* block);
}  // namespace internal

}  // namespace quill::engine::quant
