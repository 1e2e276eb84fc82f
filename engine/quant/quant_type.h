#pragma once

#include <cstdint>

namespace quill::engine::quant {

// ggml's block-quantized tensor encodings that Quill reads and writes. A tensor row is a
// sequence of blocks; each block stores `block_elements` consecutive values in
// `block_bytes` bytes (little-endian, layouts as in GGUF files):
//   Q4_0  32 values: fp16 d, 16 bytes of 4-bit q;          x = d * (q - 8)
//   Q4_1  32 values: fp16 d, fp16 m, 16 bytes of 4-bit q;  x = d * q + m
//   Q5_0  32 values: fp16 d, 32 high bits, 16 bytes q;     x = d * (q - 16)
//   Q5_1  32 values: fp16 d, fp16 m, 32 high bits, 16 B q; x = d * q + m
//   Q8_0  32 values: fp16 d, 32 int8 q;                    x = d * q
//   Q4_K 256 values: fp16 d, fp16 dmin, 8 x (6-bit scale, 6-bit min), 4-bit q;
//                    x = d * sc_j * q - dmin * m_j  (j = sub-block of 32)
//   Q5_K 256 values: as Q4_K with 5-bit q (32 bytes of high bits)
//   Q6_K 256 values: 6-bit q (low nibbles, then 2-bit highs), 16 int8 scales, fp16 d;
//                    x = d * sc_j * (q - 32)  (j = sub-block of 16)
enum class QuantType { kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ4_K, kQ5_K, kQ6_K };

inline constexpr QuantType kAllQuantTypes[] = {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0,
                                               QuantType::kQ5_1, QuantType::kQ8_0, QuantType::kQ4_K,
                                               QuantType::kQ5_K, QuantType::kQ6_K};

// Values per k-quant super-block.
inline constexpr int kSuperBlock = 256;

int BlockElements(QuantType type);
int BlockBytes(QuantType type);
// "Q4_0", "Q4_K", ...
const char* QuantTypeName(QuantType type);

}  // namespace quill::engine::quant
