#pragma once

#include <cstdint>

#include "engine/quant/quant_type.h"

namespace quill::engine::quant {

// Widens `blocks` consecutive blocks of `type` at `src` to blocks * BlockElements(type)
// floats, exactly as ggml's reference dequantizers round: every product of an fp16 scale
// and a small integer is exact in f32, and Q4_K/Q5_K subtract the min product once
// (d * sc * q - dmin * m, one rounding); Q6_K multiplies (d * sc) * (q - 32). Non-finite
// scales give non-finite values (no error).
void Dequantize(QuantType type, const uint8_t* src, int64_t blocks, float* out);

}  // namespace quill::engine::quant
