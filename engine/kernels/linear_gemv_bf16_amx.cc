// Small-m bf16 kernel on AMX tiles: the bf16 GEMV's job (linear_gemv_bf16.cc) over the same
// BA16a64b2a copy, with one TDPBF16PS (rows x 32 k x 16 columns) in place of 16 dpbf16ps a
// row. The layout is already what a B tile wants: a column block's k pair p is 64 columns x
// 2 bf16 (256 bytes), so 16 pairs of 16 columns load as one tile with a 256-byte stride.
//
// Per column block and tile of up to 16 x rows, four C tiles (the block's 64 columns)
// accumulate over all of k in f32 and are stored once; x's tile is loaded once per 16 pairs
// and serves the four.
//
// Each row's sums depend on that row alone (the tile multiply's order is fixed), so a row
// gets the same bits in a step of any size that this kernel serves, one row included.
//
// The weights stream through StreamPrefetch (every line 8 KiB ahead, into L2): a tile load
// waits for all of its 16 lines. quill-linear-bench, TinyLlama gate_up (n 11,264, k 2,048),
// 2 threads, Xeon with AMX, 3 rounds, ms at m = 2 / 4 / 16 / 31: without the prefetch
// 2.21-4.51 / 1.86-4.61 / 4.61-4.79 / 5.93-6.16; with it 2.31-2.66 / 2.30-2.61 / 2.42-2.80 /
// 3.78-4.11; the AVX512-BF16 GEMV 3.28-3.53 / 3.62-3.96 / 5.69-6.06 / 10.8-12.7. At m = 1
// (3 rounds, against the GEMV): qkv 0.36 against 0.48-0.82 ms, down 0.73-0.91 against
// 1.09-1.36, gate_up 1.51-2.56 against 2.17-2.53, lm_head 4.39-6.52 against 6.43-7.88.

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/base/cpu_features.h"
#include "engine/kernels/linear_internal.h"
#include "engine/kernels/parallel_for.h"

namespace quill::engine::kernels::linear_internal {
namespace {

#define QUILL_AMX_BF16 __attribute__((target("avx512f,avx512bw,amx-tile,amx-bf16")))

constexpr int kBlockCols = kGemvBf16BlockCols;
constexpr int kTileRows = 16;      // x rows per tile
constexpr int kPairsPerTile = 16;  // k pairs of one tile multiply (32 bf16 of k)
constexpr int kPairBytes = kBlockCols * 2 * sizeof(uint16_t);  // one k pair of a block

// ldtilecfg's 64-byte operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tile 0: `rows` x rows, 16 k pairs each. Tiles 1-3: 16 k pairs of 16 columns (B, taking
// turns). Tiles 4-7: `rows` x 16 f32 sums, one per 16 columns of the block.
QUILL_AMX_BF16 void ConfigureTiles(int rows) {
  TileConfig config;
  config.colsb[0] = 64;
  config.rows[0] = static_cast<uint8_t>(rows);
  for (int t = 1; t <= 3; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = kPairsPerTile;
  }
  for (int t = 4; t <= 7; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = static_cast<uint8_t>(rows);
  }
  // GCC's _tile_loadconfig names only the first 8 bytes as its input: make every field's
  // store happen before it.
  asm volatile("" ::"m"(config) : "memory");
  _tile_loadconfig(&config);
}

// out[rows x 64] (row stride kBlockCols) = x rows (tile rows as configured) . one block.
QUILL_AMX_BF16 void BlockTile(const uint8_t* wb, int64_t pairs, const uint8_t* x,
                              int64_t x_stride_bytes, float* out) {
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  StreamPrefetch stream(wb);
  for (int64_t p = 0; p < pairs; p += kPairsPerTile) {
    const uint8_t* w = wb + p * kPairBytes;
    stream.Through(w + kPairsPerTile * kPairBytes);
    _tile_loadd(0, x + p * 4, x_stride_bytes);
    _tile_loadd(1, w, kPairBytes);
    _tile_dpbf16ps(4, 0, 1);
    _tile_loadd(2, w + 64, kPairBytes);
    _tile_dpbf16ps(5, 0, 2);
    _tile_loadd(3, w + 128, kPairBytes);
    _tile_dpbf16ps(6, 0, 3);
    _tile_loadd(1, w + 192, kPairBytes);
    _tile_dpbf16ps(7, 0, 1);
  }
  constexpr int64_t kOutStride = kBlockCols * sizeof(float);
  _tile_stored(4, out, kOutStride);
  _tile_stored(5, out + 16, kOutStride);
  _tile_stored(6, out + 32, kOutStride);
  _tile_stored(7, out + 48, kOutStride);
}

}  // namespace

bool GemvBf16AmxAvailable() { return GetCpuFeatures().amx_bf16; }

void GemvBf16Amx(const uint16_t* w, int64_t k_padded, int64_t n, const uint16_t* x,
                 int64_t x_stride, int m, float* y, int64_t y_stride) {
  const int64_t blocks = (n + kBlockCols - 1) / kBlockCols;
  const int64_t pairs = k_padded / 2;
  const bool parallel = blocks > 1 && static_cast<int64_t>(m) * n * k_padded >= (1 << 16);
  ParallelFor(blocks, parallel, [&](int64_t b) {
    alignas(64) float out[kTileRows * kBlockCols];
    const uint8_t* wb = reinterpret_cast<const uint8_t*>(w + b * k_padded * kBlockCols);
    const int64_t n0 = b * kBlockCols;
    const int64_t cols = std::min<int64_t>(kBlockCols, n - n0);
    for (int i0 = 0; i0 < m; i0 += kTileRows) {
      const int rows = std::min(kTileRows, m - i0);
      ConfigureTiles(rows);
      BlockTile(wb, pairs, reinterpret_cast<const uint8_t*>(x + i0 * x_stride),
                x_stride * static_cast<int64_t>(sizeof(uint16_t)), out);
      for (int i = 0; i < rows; ++i)
        std::memcpy(y + (i0 + i) * y_stride + n0, out + i * kBlockCols, cols * sizeof(float));
    }
  });
}

}  // namespace quill::engine::kernels::linear_internal
