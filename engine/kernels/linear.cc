// Linear::Create: validates the parts and picks the exact or fast implementation.

#include "engine/kernels/linear.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/linear_internal.h"
#include "engine/quant/block_layout.h"

namespace quill::engine::kernels {
namespace {

absl::Status ValidatePart(const WeightView& p, size_t i) {
  if (p.type < WeightType::kF32 || p.type > WeightType::kQ6_K) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear part ", i, ": unknown weight type ", static_cast<int>(p.type)));
  }
  if (p.data == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("Linear part ", i, ": null data"));
  if (p.rows <= 0 || p.cols <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear part ", i, ": bad shape ", p.rows, " x ", p.cols));
  }
  const int64_t block = linear_internal::BlockElements(p.type);
  if (p.cols % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Linear part ", i, ": ",
                                                   linear_internal::WeightTypeName(p.type),
                                                   " cols ", p.cols, " not a multiple of ", block));
  }
  quant::QuantType qtype;
  if (linear_internal::ToQuantType(p.type, &qtype)) {
    const int64_t blocks_per_row = p.cols / block;
    const int64_t bad = quant::FindNonFiniteScale(qtype, static_cast<const uint8_t*>(p.data),
                                                  p.rows * blocks_per_row);
    if (bad >= 0) {
      return absl::DataLossError(absl::StrCat(
          "Linear part ", i, ": ", linear_internal::WeightTypeName(p.type), " row ",
          bad / blocks_per_row, " block ", bad % blocks_per_row, " has a NaN or infinite scale"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateParts(absl::Span<const WeightView> parts, int max_tokens) {
  if (parts.empty()) return absl::InvalidArgumentError("Linear needs at least one weight part");
  if (max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear max_tokens must be >= 1, got ", max_tokens));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    QUILL_RETURN_IF_ERROR(ValidatePart(parts[i], i));
    if (parts[i].cols != parts[0].cols) {
      return absl::InvalidArgumentError(absl::StrCat("Linear part ", i, " has ", parts[i].cols,
                                                     " cols, part 0 has ", parts[0].cols));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LinearScratch::Reserve(Use use, size_t bytes) {
  if (bytes <= sizes_[use]) return absl::OkStatus();
  const size_t rounded = (bytes + 63) / 64 * 64;
  buffers_[use].reset();
  sizes_[use] = 0;
  buffers_[use].reset(std::aligned_alloc(64, rounded));
  if (buffers_[use] == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Linear scratch: cannot allocate ", rounded, " bytes"));
  }
  std::memset(buffers_[use].get(), 0, rounded);  // resident from load, as each Run may use it
  sizes_[use] = rounded;
  return absl::OkStatus();
}

int64_t LinearScratch::bytes() const {
  int64_t total = 0;
  for (size_t size : sizes_) total += static_cast<int64_t>(size);
  return total;
}

absl::StatusOr<std::unique_ptr<Linear>> Linear::Create(absl::Span<const WeightView> parts,
                                                       Precision precision, int max_tokens,
                                                       std::shared_ptr<LinearScratch> scratch) {
  QUILL_RETURN_IF_ERROR(ValidateParts(parts, max_tokens));
  if (scratch == nullptr) scratch = std::make_shared<LinearScratch>();
  switch (precision) {
    case Precision::kExact:
      return linear_internal::CreateExactLinear(parts, max_tokens);
    case Precision::kFast:
      return linear_internal::CreateFastLinear(parts, max_tokens, std::move(scratch));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Linear: unknown precision ", static_cast<int>(precision)));
}

}  // namespace quill::engine::kernels
