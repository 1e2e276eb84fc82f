#pragma once

// Block types of Precision::kFast (internal to Linear): Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K
// and Q6_K weights stay at their bit width, repacked once for AVX512-VNNI; x is quantized
// per 32 values to int8 at run time and the products are int8 dot products
// (_mm512_dpbusd_epi32) with the 4/5/6-bit weights unpacked in registers. Two kernels
// share the layout and the arithmetic: a tiled one for many rows (prefill) and a decode
// one for m <= kQBlockDecodeMaxRows (linear_qblock_decode.cc), which splits each group's
// int32 dot product over independent accumulators and prefetches the weight stream.
//
// Arithmetic (the contract reference::QBlockLinear reproduces bit for bit). x row i is cut
// into blocks of 32: d_x = max|x| / 127, xq = round-to-nearest-even(x * 127 / max|x|)
// clamped to [-127, 127]. A weight "group" is the run of k sharing one scale: 32 values
// (16 for Q6_K). For output n, starting from f = 0, for each group g in order:
//   s = sum_k q[n, k] * xq[k] - offset * sum_k xq[k]       (int32; q the stored unsigned
//                                                            value, offset 8/16/32 for
//                                                            Q4_0/Q5_0/Q6_K, else 0)
//   f = fma(float(s), ws[n, g] * d_x, f)                  ws = d (Q4_*, Q5_*), d * sc (K)
//   f = fma(wm[n, g], d_x * float(sum_k xq[k]), f)         min types only: wm = m (Q4_1,
//                                                            Q5_1), -(dmin * m_g) (Q4_K, Q5_K)
// and y = f.
//
// Packed layout, per type segment (a run of fused parts of one type): column blocks of 32
// outputs; per column block, for each super-block of 256 values in k order, a header then
// its groups. A k-quant's super-block is its GGUF block; the 32-value types (Q4_0 to Q5_1)
// gather 8 GGUF blocks into one, and where k is not a multiple of 256 their last
// super-block holds the k % 256 / 32 blocks that are left (its header as short). The bytes
// per column block equal the GGUF blocks': nothing is widened.
//   header: k-quants: fp16 d[32] | fp16 dmin[32] (Q4_K, Q5_K) | scale planes: byte p of
//           every column's 12 packed 6-bit scale bytes (Q4_K, Q5_K: 12 x 32 bytes) or the
//           columns' int8 scale of group p (Q6_K: 16 x 32 bytes).
//           32-value types: per group in k order, fp16 d[32] | fp16 m[32] (min types).
//           Gathering them (before, each 32-value block was a super-block, its scales in
//           front of it) and running the full super-blocks' groups in a loop of constant
//           count made the decode kernel at 1 row take 0.80-0.83x the time for Q5_0,
//           0.87-0.90x for Q5_1 and 0.88-0.90x for Q4_0 (quill-linear-qblock-bench, Zen 5,
//           2 threads, 2048 x 11264, 3 alternated runs; Q4_1 in linear_qblock_decode.cc),
//           every output bit unchanged. A loop over a run-time count of 8 groups gained
//           nothing.
//   group:  for nibble register r (group/8 of them) and column half h (16 columns):
//           64 bytes, column c's dword holds in byte j the 4-bit q of k = 8r + j (low
//           nibble) and k = 8r + 4 + j (high nibble); then for 5/6-bit types one 64-byte
//           plane per half: byte j of column c holds the high bits of k = 4i + j at bit i
//           (5-bit) or bits 2i, 2i + 1 (6-bit).
// Columns past the end of a segment have zero scales and weights.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/kernels/linear.h"
#include "engine/kernels/linear_internal.h"
#include "engine/quant/quant_type.h"

namespace quill::engine::kernels::linear_internal {

// Shape of a block type in the packed layout.
struct QBlockFormat {
  int sb_k;     // values per super-block (a full one)
  int block_k;  // values per GGUF block: sb_k (k-quants) or 32 (8 to a super-block)
  int group_k;  // values per scale
  int bits;     // 4, 5 or 6
  bool has_min;
  int offset;  // subtracted from q (0 for the min types)
  int header;  // header bytes per column block and full super-block
  constexpr int groups() const { return sb_k / group_k; }
  constexpr int nibble_regs() const { return group_k / 8; }  // per column half
  constexpr int group_bytes() const { return 2 * 64 * (nibble_regs() + (bits > 4 ? 1 : 0)); }
  constexpr int sb_bytes() const { return header + groups() * group_bytes(); }
  // Whether a super-block may hold fewer groups (the last one of a 32-value type).
  constexpr bool short_tail() const { return block_k < sb_k; }
  // Header bytes of a super-block of n groups (n == groups() unless short_tail()).
  constexpr int header_bytes(int n) const {
    return short_tail() ? n * (header / groups()) : header;
  }
};

constexpr QBlockFormat QBlockFormatOf(quant::QuantType type) {
  switch (type) {
    case quant::QuantType::kQ4_0:
      return {256, 32, 32, 4, false, 8, 8 * 64};
    case quant::QuantType::kQ4_1:
      return {256, 32, 32, 4, true, 0, 8 * 128};
    case quant::QuantType::kQ5_0:
      return {256, 32, 32, 5, false, 16, 8 * 64};
    case quant::QuantType::kQ5_1:
      return {256, 32, 32, 5, true, 0, 8 * 128};
    case quant::QuantType::kQ4_K:
      return {256, 256, 32, 4, true, 0, 128 + 12 * 32};
    case quant::QuantType::kQ5_K:
      return {256, 256, 32, 5, true, 0, 128 + 12 * 32};
    case quant::QuantType::kQ6_K:
      return {256, 256, 16, 6, false, 32, 64 + 16 * 32};
    default:
      return {0, 0, 0, 0, false, 0, 0};
  }
}

// Super-blocks along k, the last one short where k % sb_k != 0 (32-value types only).
constexpr int64_t SuperBlocks(const QBlockFormat& f, int64_t k) {
  return (k + f.sb_k - 1) / f.sb_k;
}
// Groups in super-block sb.
constexpr int GroupsIn(const QBlockFormat& f, int64_t k, int64_t sb) {
  return static_cast<int>(std::min<int64_t>(f.groups(), (k - sb * f.sb_k) / f.group_k));
}
// Bytes of one column block: its full super-blocks, then the short one if any. Super-block
// sb starts sb * sb_bytes() into it.
constexpr int64_t ColumnBlockBytes(const QBlockFormat& f, int64_t k) {
  const int tail = static_cast<int>(k % f.sb_k / f.group_k);
  return k / f.sb_k * f.sb_bytes() + (tail > 0 ? f.header_bytes(tail) + tail * f.group_bytes() : 0);
}

// The types QBlockGemm serves.
bool IsQBlockType(WeightType type);
// AVX512 F, BW, VL and VNNI.
bool QBlockKernelAvailable();

inline constexpr int kQBlockCols = 32;       // outputs per column block
inline constexpr int kQBlockChunkRows = 64;  // x rows per pass over a column block's k
// Run() hands m up to this to the decode kernel (one sweep of the weights, every row in
// registers; measured with quill-linear-qblock-bench).
inline constexpr int kQBlockDecodeMaxRows = 16;

struct QBlockXView;  // linear_qblock_simd.h

class QBlockGemm {
 public:
  // parts: QBlock types (they may differ), equal cols, validated by Linear::Create. Call
  // only when QBlockKernelAvailable(). The x-side arrays of a Run live in `scratch`'s kXq
  // buffer (shared with other Linears; must outlive this), reserved by ReserveScratch();
  // null: this QBlockGemm keeps its own (tests and benchmarks).
  QBlockGemm(absl::Span<const WeightView> parts, int max_rows, LinearScratch* scratch = nullptr);
  // Grows `scratch` to hold this QBlockGemm's x side.
  absl::Status ReserveScratch(LinearScratch& scratch) const;

  // y[m x n] (row stride y_stride) for 1 <= m <= max_rows. Parallel over column blocks.
  // m <= kQBlockDecodeMaxRows runs RunDecode, larger m RunTiled; both follow the
  // arithmetic above exactly, so the choice never changes a bit of y.
  void Run(const float* x, int m, float* y, int64_t y_stride);
  // The many-row kernel (linear_qblock.cc): x quantized once, then per column block, 64
  // rows of x per pass, k in chunks with the decoded scales in L1 and 4-row register tiles.
  void RunTiled(const float* x, int m, float* y, int64_t y_stride);
  // The few-row kernel (linear_qblock_decode.cc), m <= kQBlockDecodeMaxRows.
  void RunDecode(const float* x, int m, float* y, int64_t y_stride);
  // Every column block over the rows of x prepared last, with the decode or tiled kernel.
  void RunColumnBlocks(bool decode, int rows, float* y, int64_t y_stride);
  int64_t packed_bytes() const { return static_cast<int64_t>(packed_.bytes()); }
  std::string name() const;  // "int8-vnni-q4_k+q6_k"

  // Per type run of output columns.
  struct Segment {
    quant::QuantType type;
    int64_t first_col = 0;  // of the fused output
    int64_t cols = 0;
    int64_t col_blocks = 0;
    size_t packed_offset = 0;  // bytes into packed_
    int x_slot = 0;            // which x-side arrays (one per distinct type)
  };

  // x-side arrays for one weight type: per row, per group of that type.
  // Byte offsets into the scratch buffer.
  struct XGroups {
    size_t d = 0;     // float: d_x of the 32-block holding the group
    size_t sum = 0;   // float: d_x * sum(xq) over the group (min types)
    size_t seed = 0;  // int32: -offset * sum(xq) over the group (offset types)
  };

 private:
  // Quantizes rows [0, rows) of x into the x-side arrays.
  void PrepareX(const float* x, int rows);
  QBlockXView XViewOf(const Segment& s) const;

  int64_t k_, n_;
  int max_rows_;
  std::vector<Segment> segments_;
  std::vector<quant::QuantType> x_types_;        // x_slot -> type
  std::vector<std::pair<int, int64_t>> blocks_;  // (segment, column block), the parallel work
  AlignedBuffer<uint8_t> packed_;
  // The x side, at byte offsets into the scratch: int8 [max_rows x k] (at 0), float
  // [max_rows x k/32] scales, int32 [max_rows x k/16] sums of xq, then xg_ per x_slot.
  size_t xd32_offset_ = 0, xs16_offset_ = 0, scratch_bytes_ = 0;
  std::vector<XGroups> xg_;
  LinearScratch* scratch_ = nullptr;
  std::unique_ptr<LinearScratch> own_scratch_;  // when none was given
  uint8_t* x_ = nullptr;  // the scratch's kXq buffer, as of the last PrepareX()
};

// Repacks rows [0, rows) of one GGUF-encoded matrix of `type` (rows of `k` values) into
// the layout above at `out` (col_blocks * ColumnBlockBytes bytes). Exposed for tests.
void PackQBlockSegment(quant::QuantType type, absl::Span<const uint8_t* const> rows, int64_t k,
                       uint8_t* out);

}  // namespace quill::engine::kernels::linear_internal
