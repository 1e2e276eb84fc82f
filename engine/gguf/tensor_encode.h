#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/base/float16.h"
#include "engine/gguf/gguf_file.h"

namespace quill::engine {


// One Q8_0 block as stored in GGUF: 32 int8 values sharing an fp16 scale.
inline constexpr int kQ8_0BlockElements = 32;
inline constexpr int kQ8_0BlockBytes = 34;

// Encodes `values` (in GGUF element order) as `type`, appending to `out`. Supports F32,
// F16, BF16 and Q8_0 (per block of 32: scale = max|x| / 127 stored as fp16, each value
// round(x / scale)); INVALID_ARGUMENT for other types or a Q8_0 count not divisible by 32.
absl::Status EncodeTensor(absl::Span<const float> values, GgmlType type,
                          std::vector<uint8_t>* out);

}  // namespace quill::engine
