#pragma once

#include <cstdint>

namespace quill::engine {

// IEEE binary16 and bfloat16 <-> float32. Widening is exact; narrowing rounds to nearest
// even, overflows to infinity and keeps NaN a (quiet) NaN. Shared by the GGUF writer and
// the kernels so both encode and decode weights bit-identically.
float Fp16ToFloat(uint16_t h);
uint16_t FloatToFp16(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);

}  // namespace quill::engine
