// QBlockGemm's packed layout (linear_qblock.h): GGUF blocks regrouped by column block so
// that one 64-byte load holds 16 columns x 8 k of 4-bit values, at the same bit width.

#include <omp.h>

#include <cstring>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/base/check.h"
#include "engine/base/cpu_features.h"
#include "engine/kernels/linear_qblock.h"
#include "engine/quant/block_layout.h"

namespace quill::engine::kernels::linear_internal {
namespace {

// Column c's (0..31) GGUF blocks of one super-block, `blocks` its first, into the super-block
// at `dst`, which holds n groups.
void PackColumn(quant::QuantType type, const QBlockFormat& f, const uint8_t* blocks, int n, int c,
                uint8_t* dst) {
  const quant::BlockFields fields = quant::FieldsOf(type);
  uint8_t q[quant::kSuperBlock];
  if (f.short_tail()) {
    // n blocks of one group each; group g's header entry is d[32] (then m[32]).
    const int block_bytes = quant::BlockBytes(type);
    const int entry = f.header / f.groups();
    for (int g = 0; g < n; ++g) {
      const uint8_t* block = blocks + g * block_bytes;
      std::memcpy(dst + g * entry + 2 * c, block + fields.d, 2);
      if (f.has_min) std::memcpy(dst + g * entry + 64 + 2 * c, block + fields.m, 2);
      quant::UnpackQuants(type, block, q + g * f.block_k);
    }
  } else {
    std::memcpy(dst + 2 * c, blocks + fields.d, 2);
    if (type == quant::QuantType::kQ6_K) {
      for (int p = 0; p < 16; ++p) dst[64 + 32 * p + c] = blocks[fields.scales + p];
    } else {
      if (f.has_min) std::memcpy(dst + 64 + 2 * c, blocks + fields.m, 2);
      if (fields.scales >= 0) {
        for (int p = 0; p < 12; ++p) dst[128 + 32 * p + c] = blocks[fields.scales + p];
      }
    }
    quant::UnpackQuants(type, blocks, q);
  }
  const int h = c / 16, lane = c % 16;
  for (int g = 0; g < n; ++g) {
    const uint8_t* qg = q + g * f.group_k;
    uint8_t* gp = dst + f.header_bytes(n) + g * f.group_bytes();
    for (int r = 0; r < f.nibble_regs(); ++r) {
      uint8_t* word = gp + (2 * r + h) * 64 + 4 * lane;
      for (int j = 0; j < 4; ++j)
        word[j] = static_cast<uint8_t>((qg[8 * r + j] & 0x0F) | ((qg[8 * r + 4 + j] & 0x0F) << 4));
    }
    if (f.bits == 4) continue;
    uint8_t* plane = gp + (2 * f.nibble_regs() + h) * 64 + 4 * lane;
    for (int i = 0; i < f.group_k / 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int high = qg[4 * i + j] >> 4;  // 1 bit (5-bit types) or 2 bits (Q6_K)
        plane[j] = static_cast<uint8_t>(plane[j] | (high << (f.bits == 5 ? i : 2 * i)));
      }
  }
}

}  // namespace

bool IsQBlockType(WeightType type) {
  quant::QuantType q;
  return ToQuantType(type, &q) && q != quant::QuantType::kQ8_0;
}

bool QBlockKernelAvailable() {
  const CpuFeatures& f = GetCpuFeatures();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni;
}

void PackQBlockSegment(quant::QuantType type, absl::Span<const uint8_t* const> rows, int64_t k,
                       uint8_t* out) {
  const QBlockFormat f = QBlockFormatOf(type);
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t sbs = SuperBlocks(f, k);
  const int64_t col_blocks = (n + kQBlockCols - 1) / kQBlockCols;
  const int64_t sb_file_bytes = int64_t{f.sb_k / f.block_k} * quant::BlockBytes(type);
#pragma omp parallel for schedule(static) if (n * k >= (1 << 16))
  for (int64_t cb = 0; cb < col_blocks; ++cb) {
    for (int64_t sb = 0; sb < sbs; ++sb) {
      const int groups = GroupsIn(f, k, sb);
      uint8_t* dst = out + cb * ColumnBlockBytes(f, k) + sb * f.sb_bytes();
      std::memset(dst, 0, f.header_bytes(groups) + groups * f.group_bytes());
      for (int c = 0; c < kQBlockCols && cb * kQBlockCols + c < n; ++c)
        PackColumn(type, f, rows[cb * kQBlockCols + c] + sb * sb_file_bytes, groups, c, dst);
    }
  }
}

QBlockGemm::QBlockGemm(absl::Span<const WeightView> parts, int max_rows, LinearScratch* scratch)
    : k_(parts[0].cols), n_(TotalRows(parts)), max_rows_(max_rows), scratch_(scratch) {
  // Consecutive parts of one type form a segment.
  int64_t col = 0;
  size_t bytes = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    quant::QuantType type;
    ToQuantType(parts[i].type, &type);
    if (segments_.empty() || segments_.back().type != type) {
      Segment s;
      s.type = type;
      s.first_col = col;
      segments_.push_back(s);
    }
    segments_.back().cols += parts[i].rows;
    col += parts[i].rows;
  }
  for (Segment& s : segments_) {
    s.col_blocks = (s.cols + kQBlockCols - 1) / kQBlockCols;
    s.packed_offset = bytes;
    bytes += static_cast<size_t>(s.col_blocks * ColumnBlockBytes(QBlockFormatOf(s.type), k_));
    size_t slot = 0;
    while (slot < x_types_.size() && x_types_[slot] != s.type) ++slot;
    if (slot == x_types_.size()) x_types_.push_back(s.type);
    s.x_slot = static_cast<int>(slot);
  }
  packed_ = AlignedBuffer<uint8_t>(bytes, /*huge_pages=*/true);
  // Row pointers of the fused parts, in output order.
  std::vector<const uint8_t*> rows;
  rows.reserve(n_);
  for (const WeightView& p : parts)
    for (int64_t i = 0; i < p.rows; ++i)
      rows.push_back(static_cast<const uint8_t*>(p.data) + i * RowBytes(p.type, k_));
  for (size_t si = 0; si < segments_.size(); ++si) {
    const Segment& s = segments_[si];
    PackQBlockSegment(s.type, absl::MakeConstSpan(rows.data() + s.first_col, s.cols), k_,
                      packed_.data() + s.packed_offset);
    for (int64_t cb = 0; cb < s.col_blocks; ++cb) blocks_.emplace_back(static_cast<int>(si), cb);
  }

  // The x side's layout in the scratch (all max_rows rows), each array 64-byte aligned.
  const size_t x_rows = static_cast<size_t>(max_rows);
  size_t offset = 0;
  const auto take = [&offset](size_t array_bytes) {
    const size_t at = offset;
    offset += (array_bytes + 63) / 64 * 64;
    return at;
  };
  take(x_rows * k_);  // xq at 0
  xd32_offset_ = take(x_rows * (k_ / 32) * sizeof(float));
  xs16_offset_ = take(x_rows * (k_ / 16) * sizeof(int32_t));
  xg_.resize(x_types_.size());
  for (size_t slot = 0; slot < x_types_.size(); ++slot) {
    const QBlockFormat f = QBlockFormatOf(x_types_[slot]);
    const size_t groups = x_rows * (k_ / f.group_k);
    xg_[slot].d = take(groups * sizeof(float));
    if (f.has_min) xg_[slot].sum = take(groups * sizeof(float));
    if (f.offset != 0) xg_[slot].seed = take(groups * sizeof(int32_t));
  }
  scratch_bytes_ = offset;
  if (scratch_ == nullptr) {
    own_scratch_ = std::make_unique<LinearScratch>();
    scratch_ = own_scratch_.get();
    // Tests and benchmarks only (Linear passes a scratch it has reserved).
    QUILL_CHECK(ReserveScratch(*scratch_).ok());
  }
}

absl::Status QBlockGemm::ReserveScratch(LinearScratch& scratch) const {
  return scratch.Reserve(LinearScratch::kXq, scratch_bytes_);
}

std::string QBlockGemm::name() const {
  std::string name = "int8-vnni-";
  for (size_t i = 0; i < x_types_.size(); ++i) {
    absl::StrAppend(&name, i > 0 ? "+" : "",
                    absl::AsciiStrToLower(quant::QuantTypeName(x_types_[i])));
  }
  return name;
}

}  // namespace quill::engine::kernels::linear_internal
