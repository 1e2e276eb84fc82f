#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf_file.h"
#include "engine/quant/quant_type.h"

namespace quill::engine {

// Storage layout of a ggml tensor type: `block_elements` consecutive elements (along the
// innermost dimension) are stored in `block_bytes` bytes. Plain types have blocks of 1.
struct GgmlTypeTraits {
  int64_t block_elements = 0;
  int64_t block_bytes = 0;
};

// False for a type number the reader does not know (the traits are left untouched).
bool LookupGgmlType(uint32_t raw_type, GgmlTypeTraits* traits);

// The block format of a ggml block type Quill can decode and encode (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K); false for every other type.
bool ToQuantType(GgmlType type, quant::QuantType* out);

// Element count and encoded size of a tensor of `type` with GGUF `dims` (innermost
// first). INVALID_ARGUMENT for an unknown type, 0 or 5+ dims, a non-positive dimension,
// an element count or byte size that overflows int64, or an innermost dimension that is
// not a multiple of the type's block size.
struct GgmlTensorSize {
  int64_t num_elements = 0;
  uint64_t size_bytes = 0;
};
absl::StatusOr<GgmlTensorSize> ComputeGgmlTensorSize(GgmlType type,
                                                     const std::vector<int64_t>& dims);

}  // namespace quill::engine
