// Exact re-encoding of k-quant super-blocks. The reference search is not idempotent: on the
// dequantized values of a block it can land on another grid (a stored block whose levels do
// not reach 0 or nmax) or another d. When a super-block's values lie on a grid, this looks
// for an encoding that reproduces them bit for bit, starting from the reference's choices,
// so re-quantizing a quantized model is lossless. Values off any grid (real weights) are
// left to the reference result after a cheap check.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/base/float16.h"
#include "engine/quant/block_layout.h"
#include "engine/quant/dequantize.h"
#include "engine/quant/quantize.h"

namespace quill::engine::quant::internal {
namespace {

bool SameBits(const float* a, const float* b, int n) { return std::memcmp(a, b, 4 * n) == 0; }

// True when the distinct values of x[0..n) are at most `levels` points of one grid: every gap
// between neighbours is (up to rounding) a multiple of the smallest gap over 1, 2 or 3.
bool OnAGrid(const float* x, int n, int levels) {
  float v[32];
  std::copy(x, x + n, v);
  std::sort(v, v + n);
  const int distinct = static_cast<int>(std::unique(v, v + n) - v);
  if (distinct > levels) return false;
  if (distinct <= 2) return true;
  float g = v[1] - v[0];
  for (int i = 2; i < distinct; ++i) g = std::min(g, v[i] - v[i - 1]);
  for (int k = 1; k <= 3; ++k) {
    const float step = g / static_cast<float>(k);
    bool ok = (v[distinct - 1] - v[0]) / step <= static_cast<float>(levels - 1) + 0.5f;
    for (int i = 1; i < distinct && ok; ++i) {
      const float r = (v[i] - v[i - 1]) / step;
      ok = std::fabs(r - std::nearbyint(r)) < 1e-3f;
    }
    if (ok) return true;
  }
  return false;
}

// Smallest gap between the sorted distinct values of x[0..n), or 0 if they are all equal;
// also the count of distinct values.
float MinGap(const float* x, int n, int* distinct) {
  float v[32];
  std::copy(x, x + n, v);
  std::sort(v, v + n);
  float gap = 0;
  *distinct = 1;
  for (int i = 1; i < n; ++i) {
    if (v[i] == v[i - 1]) continue;
    ++*distinct;
    const float g = v[i] - v[i - 1];
    if (gap == 0 || g < gap) gap = g;
  }
  return gap;
}

// Q4_K/Q5_K sub-block: scale and min indices (6 bits) and levels reproducing x exactly with
// the given d and dmin, preferring (pref_sc, pref_m).
bool SolveScaleMin(const float* x, int nmax, float d, float dmin, int pref_sc, int pref_m,
                   uint8_t* sc_out, uint8_t* m_out, uint8_t* q) {
  const auto reproduces = [&](int sc, int m, uint8_t* levels) {
    const float scale = d * static_cast<float>(sc);
    const float min = dmin * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) {
      const int l = scale != 0.0f ? NearestInt((x[i] + min) / scale) : 0;
      if (l < 0 || l > nmax) return false;
      if (scale * static_cast<float>(l) - min != x[i]) return false;
      levels[i] = static_cast<uint8_t>(l);
    }
    return true;
  };
  uint8_t levels[32];
  if (reproduces(pref_sc, pref_m, levels)) {
    *sc_out = pref_sc, *m_out = pref_m;
    std::memcpy(q, levels, 32);
    return true;
  }
  float vmin = x[0], vmax = x[0];
  for (int i = 1; i < 32; ++i) vmin = std::min(vmin, x[i]), vmax = std::max(vmax, x[i]);
  for (int sc = 0; sc < 64; ++sc) {
    const float a = d * static_cast<float>(sc);
    if (sc == 0 || a == 0.0f) {
      if (vmin != vmax) continue;
    } else {
      const float span = (vmax - vmin) / a;
      if (std::fabs(span - std::nearbyint(span)) > 1e-3f || span > nmax + 0.5f) continue;
    }
    // The smallest value sits at some level qmin: min = scale * qmin - vmin.
    const int span = a != 0.0f ? NearestInt((vmax - vmin) / a) : 0;
    for (int qmin = 0; qmin + span <= nmax; ++qmin) {
      const int m = dmin > 0.0f ? NearestInt((a * static_cast<float>(qmin) - vmin) / dmin) : 0;
      if (m < 0 || m > 63) continue;
      if (reproduces(sc, m, levels)) {
        *sc_out = sc, *m_out = m;
        std::memcpy(q, levels, 32);
        return true;
      }
    }
  }
  return false;
}

bool RepairScaleMin(QuantType type, const float* x, uint8_t* block) {
  const int nmax = type == QuantType::kQ4_K ? 15 : 31;
  const BlockFields f = FieldsOf(type);
  // Every sub-block must lie on a grid of nmax + 1 levels.
  float max_gap = 0;
  for (int j = 0; j < 8; ++j) {
    if (!OnAGrid(x + 32 * j, 32, nmax + 1)) return false;
    int distinct;
    max_gap = std::max(max_gap, MinGap(x + 32 * j, 32, &distinct));
  }
  uint8_t ref_sc[8], ref_m[8];
  for (int j = 0; j < 8; ++j) UnpackScaleMin(block + f.scales, j, &ref_sc[j], &ref_m[j]);
  const uint16_t ref_d = LoadU16(block + f.d), ref_dmin = LoadU16(block + f.m);
  // d: the reference's, or the largest step over 63 (the sub-block with scale index 63).
  std::vector<uint16_t> ds = {ref_d};
  const uint16_t derived = FloatToFp16(max_gap / 63.0f);
  for (int u = -2; u <= 2; ++u) ds.push_back(static_cast<uint16_t>(derived + u));
  // dmin: the reference's, or the largest min over 63, where a sub-block's min is
  // d * sc * qmin - (its smallest value) for its lowest level qmin (tried 0..2).
  std::vector<uint16_t> dmins = {ref_dmin};
  for (int j = 0; j < 8; ++j) {
    float vmin = x[32 * j];
    for (int i = 1; i < 32; ++i) vmin = std::min(vmin, x[32 * j + i]);
    for (int qmin = 0; qmin <= 2; ++qmin) {
      const float b = Fp16ToFloat(ref_d) * ref_sc[j] * static_cast<float>(qmin) - vmin;
      if (b > 0) dmins.push_back(FloatToFp16(b / 63.0f));
    }
  }
  for (uint16_t d_bits : ds) {
    for (uint16_t dmin_bits : dmins) {
      const float d = Fp16ToFloat(d_bits), dmin = Fp16ToFloat(dmin_bits);
      uint8_t sc[8], m[8], q[kSuperBlock];
      bool ok = true;
      for (int j = 0; j < 8 && ok; ++j)
        ok = SolveScaleMin(x + 32 * j, nmax, d, dmin, ref_sc[j], ref_m[j], &sc[j], &m[j],
                           q + 32 * j);
      if (!ok) continue;
      uint8_t candidate[176];
      std::memcpy(candidate, block, BlockBytes(type));
      StoreU16(candidate + f.d, d_bits);
      StoreU16(candidate + f.m, dmin_bits);
      PackScaleMins(sc, m, candidate + f.scales);
      PackQuants(type, q, candidate);
      float y[kSuperBlock];
      Dequantize(type, candidate, 1, y);
      if (!SameBits(x, y, kSuperBlock)) continue;
      std::memcpy(block, candidate, BlockBytes(type));
      return true;
    }
  }
  return false;
}

// Q6_K sub-block of 16: the int8 scale and levels reproducing x with the given d, preferring
// pref_sc, else the first fit from -128 up. (A block with no level at -32 has a sign-mirrored
// twin encoding of the same values; which one llama-quantize stored depends on the original
// weights, and this order matched it more often on the shared files than the reference's
// "largest value on the negative side".)
bool SolveSigned(const float* x, float d, int pref_sc, int8_t* sc_out, uint8_t* q) {
  const auto reproduces = [&](int sc, uint8_t* levels) {
    const float scale = d * static_cast<float>(sc);
    for (int i = 0; i < 16; ++i) {
      const int l = scale != 0.0f ? NearestInt(x[i] / scale) : 0;
      if (l < -32 || l > 31) return false;
      const float v = scale * static_cast<float>(l);
      if (std::memcmp(&v, &x[i], 4) != 0) return false;
      levels[i] = static_cast<uint8_t>(l + 32);
    }
    return true;
  };
  uint8_t levels[16];
  if (reproduces(pref_sc, levels)) {
    *sc_out = static_cast<int8_t>(pref_sc);
    std::memcpy(q, levels, 16);
    return true;
  }
  float vmin = x[0], vmax = x[0];
  for (int i = 1; i < 16; ++i) vmin = std::min(vmin, x[i]), vmax = std::max(vmax, x[i]);
  for (int sc = -128; sc < 128; ++sc) {
    if (sc == 0) continue;
    const float a = d * static_cast<float>(sc);
    // The largest value must land on the negative side.
    const float span = (vmax - vmin) / std::fabs(a);
    if (std::fabs(span - std::nearbyint(span)) > 1e-3f || span > 63.5f) continue;
    if (reproduces(sc, levels)) {
      *sc_out = static_cast<int8_t>(sc);
      std::memcpy(q, levels, 16);
      return true;
    }
  }
  return false;
}

bool RepairSigned(const float* x, uint8_t* block) {
  const BlockFields f = FieldsOf(QuantType::kQ6_K);
  const uint16_t ref_d = LoadU16(block + f.d);
  const int8_t* ref_sc = reinterpret_cast<const int8_t*>(block + f.scales);
  // d: the reference's, or the largest step over 128 (the sub-block with scale -128).
  float max_gap = 0;
  for (int j = 0; j < 16; ++j) {
    if (!OnAGrid(x + 16 * j, 16, 64)) return false;
    int distinct;
    max_gap = std::max(max_gap, MinGap(x + 16 * j, 16, &distinct));
  }
  // The sign of d matters: only -128 is representable for the largest sub-block.
  std::vector<uint16_t> ds = {ref_d, static_cast<uint16_t>(ref_d ^ 0x8000)};
  const uint16_t derived = FloatToFp16(max_gap / 128.0f);
  for (int u = -2; u <= 2; ++u) {
    ds.push_back(static_cast<uint16_t>(derived + u));
    ds.push_back(static_cast<uint16_t>((derived + u) ^ 0x8000));
  }
  for (uint16_t d_bits : ds) {
    const float d = Fp16ToFloat(d_bits);
    if (!(d != 0.0f) || !std::isfinite(d)) continue;
    int8_t sc[16];
    uint8_t q[kSuperBlock];
    bool ok = true;
    for (int j = 0; j < 16 && ok; ++j)
      ok = SolveSigned(x + 16 * j, d, ref_sc[j], &sc[j], q + 16 * j);
    if (!ok) continue;
    uint8_t candidate[210];
    std::memcpy(candidate, block, 210);
    StoreU16(candidate + f.d, d_bits);
    std::memcpy(candidate + f.scales, sc, 16);
    PackQuants(QuantType::kQ6_K, q, candidate);
    float y[kSuperBlock];
    Dequantize(QuantType::kQ6_K, candidate, 1, y);
    if (!SameBits(x, y, kSuperBlock)) continue;
    std::memcpy(block, candidate, 210);
    return true;
  }
  return false;
}

}  // namespace

bool RepairExact(QuantType type, const float* x, uint8_t* block) {
  if (BlockElements(type) != kSuperBlock) return false;
  float y[kSuperBlock];
  Dequantize(type, block, 1, y);
  if (SameBits(x, y, BlockElements(type))) return false;
  if (type == QuantType::kQ4_K || type == QuantType::kQ5_K) return RepairScaleMin(type, x, block);
  if (type == QuantType::kQ6_K) return RepairSigned(x, block);
  return false;
}

}  // namespace quill::engine::quant::internal
