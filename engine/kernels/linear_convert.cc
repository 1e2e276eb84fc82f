// Scalar element conversions and row widening (exact), shared by every Linear path.

#include <sys/mman.h>

#include <cstring>

#include "engine/kernels/linear.h"
#include "engine/kernels/linear_internal.h"
#include "engine/quant/dequantize.h"

namespace quill::engine::kernels {
namespace {

uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

void DequantizeRow(const WeightView& w, int64_t row, float* out) {
  const int64_t cols = w.cols;
  const uint8_t* base =
      static_cast<const uint8_t*>(w.data) + row * linear_internal::RowBytes(w.type, cols);
  switch (w.type) {
    case WeightType::kF32:
      std::memcpy(out, base, cols * sizeof(float));
      return;
    case WeightType::kF16:
      for (int64_t c = 0; c < cols; ++c) out[c] = Fp16ToFloat(LoadU16(base + 2 * c));
      return;
    case WeightType::kBF16:
      for (int64_t c = 0; c < cols; ++c) out[c] = Bf16ToFloat(LoadU16(base + 2 * c));
      return;
    default:
      break;
  }
  quant::QuantType type;
  if (linear_internal::ToQuantType(w.type, &type)) {
    quant::Dequantize(type, base, cols / quant::BlockElements(type), out);
  }
}

namespace linear_internal {

void AdviseHugePages(void* p, size_t bytes) {
  const size_t whole = bytes / (size_t{2} << 20) * (size_t{2} << 20);
  if (whole > 0) madvise(p, whole, MADV_HUGEPAGE);  // advisory: failure only costs speed
}

bool ToQuantType(WeightType type, quant::QuantType* out) {
  switch (type) {
    case WeightType::kF32:
    case WeightType::kF16:
    case WeightType::kBF16:
      return false;
    case WeightType::kQ8_0:
      *out = quant::QuantType::kQ8_0;
      return true;
    case WeightType::kQ4_0:
      *out = quant::QuantType::kQ4_0;
      return true;
    case WeightType::kQ4_1:
      *out = quant::QuantType::kQ4_1;
      return true;
    case WeightType::kQ5_0:
      *out = quant::QuantType::kQ5_0;
      return true;
    case WeightType::kQ5_1:
      *out = quant::QuantType::kQ5_1;
      return true;
    case WeightType::kQ4_K:
      *out = quant::QuantType::kQ4_K;
      return true;
    case WeightType::kQ5_K:
      *out = quant::QuantType::kQ5_K;
      return true;
    case WeightType::kQ6_K:
      *out = quant::QuantType::kQ6_K;
      return true;
  }
  return false;
}

int64_t BlockElements(WeightType type) {
  quant::QuantType q;
  return ToQuantType(type, &q) ? quant::BlockElements(q) : 1;
}

int64_t RowBytes(WeightType type, int64_t cols) {
  switch (type) {
    case WeightType::kF32:
      return cols * 4;
    case WeightType::kF16:
    case WeightType::kBF16:
      return cols * 2;
    default:
      break;
  }
  quant::QuantType q;
  if (!ToQuantType(type, &q)) return 0;
  return cols / quant::BlockElements(q) * quant::BlockBytes(q);
}

const char* WeightTypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "f32";
    case WeightType::kF16:
      return "f16";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kQ8_0:
      return "q8_0";
    case WeightType::kQ4_0:
      return "q4_0";
    case WeightType::kQ4_1:
      return "q4_1";
    case WeightType::kQ5_0:
      return "q5_0";
    case WeightType::kQ5_1:
      return "q5_1";
    case WeightType::kQ4_K:
      return "q4_k";
    case WeightType::kQ5_K:
      return "q5_k";
    case WeightType::kQ6_K:
      return "q6_k";
  }
  return "unknown";
}

int64_t TotalRows(absl::Span<const WeightView> parts) {
  int64_t rows = 0;
  for (const WeightView& p : parts) rows += p.rows;
  return rows;
}

void WidenPartsToF32(absl::Span<const WeightView> parts, float* out, int64_t out_stride) {
  int64_t r0 = 0;
  for (const WeightView& p : parts) {
#pragma omp parallel for schedule(static) if (p.rows * p.cols >= (1 << 16))
    for (int64_t r = 0; r < p.rows; ++r) DequantizeRow(p, r, out + (r0 + r) * out_stride);
    r0 += p.rows;
  }
}

void ConvertPartsToBf16(absl::Span<const WeightView> parts, uint16_t* out, int64_t out_stride) {
  int64_t r0 = 0;
  for (const WeightView& p : parts) {
    const bool is_bf16 = p.type == WeightType::kBF16;
#pragma omp parallel if (p.rows * p.cols >= (1 << 16))
    {
      AlignedBuffer<float> row(is_bf16 ? 0 : p.cols);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < p.rows; ++r) {
        uint16_t* dst = out + (r0 + r) * out_stride;
        if (is_bf16) {
          std::memcpy(dst, static_cast<const uint8_t*>(p.data) + r * p.cols * 2, p.cols * 2);
        } else {
          DequantizeRow(p, r, row.data());
          for (int64_t c = 0; c < p.cols; ++c) dst[c] = FloatToBf16(row.data()[c]);
        }
      }
    }
    r0 += p.rows;
  }
}

}  // namespace linear_internal
}  // namespace quill::engine::kernels
