#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/base/float16.h"
#include "engine/gguf/gguf_file.h"

namespace quill::engine {

// Encodes `values` (in GGUF element order) as `type`, appending to `out`. Supports F32,
// F16, BF16 and the block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K (rounded as
// ggml's reference quantizers do; engine/quant/quantize.h). INVALID_ARGUMENT for other
// types, a value count that is not a multiple of the block size, or a non-finite value in
// a block type.
absl::Status EncodeTensor(absl::Span<const float> values, GgmlType type,
                          std::vector<uint8_t>* out);

}  // namespace quill::engine
