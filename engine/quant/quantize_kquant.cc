// Reference quantization of the k-quant super-blocks (Q4_K, Q5_K, Q6_K), written from the
// formats' definition and ggml's documented rounding: per sub-block a search for the scale
// (and min) that minimizes a weighted squared error, then the sub-block scales quantized
// against the block's largest. The float expressions keep ggml's operation order (compiled
// with -ffp-contract=off) so that re-quantizing dequantized blocks reproduces them.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/base/float16.h"
#include "engine/quant/block_layout.h"
#include "engine/quant/quantize.h"

namespace quill::engine::quant::internal {
namespace {

// Below this a group counts as all zeros.
constexpr float kGroupMaxEps = 1e-15f;

struct AffineFit {
  float scale = 0.0f;
  float neg_min = 0.0f;  // x ~ scale * q - neg_min, neg_min >= 0
};

// Levels q in [0, nmax] for x ~ scale * q + min (min <= 0), minimizing sum w (x - fit)^2.
// Starts from the plain min/max grid, then tries nstep + 1 grids with nmax + rmin + rdelta
// * i steps across [min, max], refitting scale and min by weighted least squares on each
// grid's levels and keeping the best. `q` receives the chosen levels.
AffineFit SearchScaleMin(int n, int nmax, const float* x, const float* w, uint8_t* q, float rmin,
                         float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  AffineFit fit;
  if (max == min) {
    std::memset(q, 0, n);
    fit.neg_min = -min;
    return fit;
  }
  const float fnmax = static_cast<float>(nmax);
  float iscale = fnmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    q[i] = static_cast<uint8_t>(std::clamp(l, 0, nmax));
    const float diff = scale * q[i] + min - x[i];
    best_error += w[i] * (diff * diff);
  }
  uint8_t trial[32];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * step + fnmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * trial[i] + this_min - x[i];
      error += w[i] * (diff * diff);
    }
    if (error < best_error) {
      std::memcpy(q, trial, n);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  fit.scale = scale;
  fit.neg_min = -min;
  return fit;
}

// Q4_K (nmax 15) and Q5_K (nmax 31): 8 sub-blocks of 32.
void QuantizeScaleMinBlock(QuantType type, const float* x, int nmax, float rmin, int nstep,
                           uint8_t* block) {
  uint8_t q[kSuperBlock];
  float scales[8], mins[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    // Weights: the sub-block's RMS plus each value's magnitude.
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
    const float rms = std::sqrt(sum_x2 / 32);
    float w[32];
    for (int l = 0; l < 32; ++l) w[l] = rms + std::fabs(xj[l]);
    const AffineFit fit = SearchScaleMin(32, nmax, xj, w, q + 32 * j, rmin, 0.1f, nstep);
    scales[j] = fit.scale;
    mins[j] = fit.neg_min;
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    // ggml stores nearest_int() in a uint8_t before the clamp.
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
  }
  const BlockFields f = FieldsOf(type);
  PackScaleMins(ls, lm, block + f.scales);
  const uint16_t d_bits = FloatToFp16(max_scale / 63.f);
  const uint16_t dmin_bits = FloatToFp16(max_min / 63.f);
  StoreU16(block + f.d, d_bits);
  StoreU16(block + f.m, dmin_bits);
  // Levels again against the stored scales (a zero scale keeps the search's levels).
  for (int j = 0; j < 8; ++j) {
    const float d = Fp16ToFloat(d_bits) * ls[j];
    if (d == 0.0f) continue;
    const float dm = Fp16ToFloat(dmin_bits) * lm[j];
    for (int l = 0; l < 32; ++l) {
      const int v = NearestInt((x[32 * j + l] + dm) / d);
      q[32 * j + l] = static_cast<uint8_t>(std::clamp(v, 0, nmax));
    }
  }
  PackQuants(type, q, block);
}

// Signed levels l in [-nmax, nmax - 1] for x ~ scale * l, weights x^2. Tries the grid
// through the value of largest magnitude (which lands on -nmax) and 18 slightly stretched
// or shrunk grids, keeping the one with the largest sum(w x l)^2 / sum(w l^2) (least
// squares scale). `q` receives l + nmax.
float SearchScaleSigned(int n, int nmax, const float* x, uint8_t* q) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(q, 0, n);
    return 0.0f;
  }
  const auto level = [&](float iscale, int i) {
    return std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
  };
  const auto sums = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(level(iscale, i));
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  float iscale = -static_cast<float>(nmax) / max;
  for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(level(iscale, i) + nmax);
  float sumlx, suml2;
  sums(iscale, &sumlx, &suml2);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * step) / max;
    sums(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(level(iscale, i) + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace

void QuantizeBlockQ4K(const float* x, uint8_t* block) {
  QuantizeScaleMinBlock(QuantType::kQ4_K, x, 15, -1.0f, 20, block);
}

void QuantizeBlockQ5K(const float* x, uint8_t* block) {
  QuantizeScaleMinBlock(QuantType::kQ5_K, x, 31, -0.5f, 15, block);
}

void QuantizeBlockQ6K(const float* x, uint8_t* block) {
  uint8_t q[kSuperBlock];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = SearchScaleSigned(16, 32, x + 16 * j, q + 16 * j);
    if (std::fabs(scales[j]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  const BlockFields f = FieldsOf(QuantType::kQ6_K);
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(block, 0, BlockBytes(QuantType::kQ6_K));
    return;
  }
  const float iscale = -128.f / max_scale;
  const uint16_t d_bits = FloatToFp16(1 / iscale);
  StoreU16(block + f.d, d_bits);
  int8_t* sc = reinterpret_cast<int8_t*>(block + f.scales);
  for (int j = 0; j < 16; ++j)
    sc[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[j])));
  for (int j = 0; j < 16; ++j) {
    const float d = Fp16ToFloat(d_bits) * sc[j];
    if (d == 0.0f) continue;
    for (int l = 0; l < 16; ++l) {
      const int v = std::clamp(NearestInt(x[16 * j + l] / d), -32, 31);
      q[16 * j + l] = static_cast<uint8_t>(v + 32);
    }
  }
  PackQuants(QuantType::kQ6_K, q, block);
}

}  // namespace quill::engine::quant::internal
