#include "engine/sampler/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/check.h"

namespace quill::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Weights are in [0, 1]; their float bits >> 19 (exponent and 4 mantissa bits) index a
// histogram whose buckets are ordered like the values. 1.0f lands in bucket 2032.
constexpr int kBucketShift = 19;
constexpr int kNumBuckets = 2048;
constexpr int kHistograms = 4;

absl::Status FieldError(absl::string_view field, absl::string_view range, double got) {
  return absl::InvalidArgumentError(
      absl::StrCat("sampling.", field, " must be ", range, ", got ", got));
}

// Lowest id among the largest values (NaN never wins).
TokenId Argmax(const float* x, int n) {
  TokenId best = 0;
  float best_value = kNegInf;
  bool found = false;
  for (int i = 0; i < n; ++i) {
    if (x[i] > best_value || (!found && x[i] == best_value)) {
      best = i;
      best_value = x[i];
      found = true;
    }
  }
  return best;
}

// exp(x) for x <= 0: 2^n times a degree-7 Taylor polynomial of the remainder
// (|r| <= ln2/2), about 2 ulp. Weights below exp(-87) need no accuracy (< 1e-37 of the top
// token's). The AVX2 version (the tree's x86-64-v3 baseline) and the scalar one run the
// same IEEE operations in the same order, so they agree bit for bit.
inline float ExpNonPositive(float x) {
  x = std::max(x, -87.0f);
  const float n = std::fma(x, 1.44269504f, 12582912.0f) - 12582912.0f;  // round to nearest
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.0f / 5040.0f;
  for (float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) {
    p = std::fma(p, r, c);
  }
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline __m256 ExpNonPositive8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504f), magic), magic);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  for (float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) {
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  }
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// Lanes [0, rem) of an AVX2 mask, rem in [0, 8].
inline __m256i Lanes(int rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// x[i] /= temperature with NaN turned into -inf (it can never be chosen and would break the
// orderings below); returns the maximum.
float TemperAndMax(float* x, int n, float temperature) {
  const __m256 t = _mm256_set1_ps(temperature);
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  __m256 max8 = neg_inf;
  for (int i = 0; i < n; i += 8) {
    const __m256i lanes = Lanes(n - i);
    __m256 v = _mm256_div_ps(_mm256_maskload_ps(x + i, lanes), t);
    v = _mm256_blendv_ps(v, neg_inf, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    _mm256_maskstore_ps(x + i, lanes, v);
    max8 = _mm256_max_ps(max8, _mm256_blendv_ps(neg_inf, v, _mm256_castsi256_ps(lanes)));
  }
  alignas(32) float m[8];
  _mm256_store_ps(m, max8);
  return *std::max_element(m, m + 8);
}

// x[i] = exp(x[i] - max) for all n.
void ExpWeights(float* x, int n, float max_value) {
  const __m256 vmax = _mm256_set1_ps(max_value);
  for (int i = 0; i < n; i += 8) {
    const __m256i lanes = Lanes(n - i);
    const __m256 v = _mm256_sub_ps(_mm256_maskload_ps(x + i, lanes), vmax);
    _mm256_maskstore_ps(x + i, lanes, ExpNonPositive8(v));
  }
}

// Sum of w[0, count), count <= kDrawBlock, with a fixed order (8 lanes, then a fixed fold).
inline float BlockSum(const float* w, int count) {
  __m256 acc = _mm256_setzero_ps();
  for (int i = 0; i < count; i += 8) {
    acc = _mm256_add_ps(acc, _mm256_maskload_ps(w + i, Lanes(count - i)));
  }
  const __m128 a = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

constexpr int kDrawBlock = 64;

// Draws id i of [0, n) with probability w[i] / sum(w): a pass over block sums finds the
// block holding u, then a walk inside it. Both passes sum blocks identically.
TokenId DrawContiguous(const float* w, int n, double uniform) {
  double total = 0.0;
  for (int b = 0; b < n; b += kDrawBlock) total += BlockSum(w + b, std::min(kDrawBlock, n - b));
  const double u = uniform * total;
  double cumulative = 0.0;
  for (int b = 0; b < n; b += kDrawBlock) {
    const int count = std::min(kDrawBlock, n - b);
    const double block = BlockSum(w + b, count);
    if (u < cumulative + block) {
      for (int i = 0; i < count; ++i) {
        cumulative += w[b + i];
        if (u < cumulative) return b + i;
      }
      return b + count - 1;  // rounding between the two sums: stay in this block
    }
    cumulative += block;
  }
  return n - 1;
}

inline int Bucket(float w) {
  uint32_t bits;
  std::memcpy(&bits, &w, sizeof(bits));
  return static_cast<int>(bits >> kBucketShift);
}

// The canonical candidate order: larger value first, then lower id. A total order, so the
// selected sets are the same on every standard library.
struct ByValueThenId {
  const float* x;
  bool operator()(TokenId a, TokenId b) const {
    return x[a] > x[b] || (x[a] == x[b] && a < b);
  }
};

// Weighted quickselect, expected O(n): moves the smallest set of best candidates (in
// ByValueThenId order) whose weight reaches `target` to cand[0, k), in no particular
// order, and returns k (all n if rounding keeps the total short of the target).
int SelectNucleus(const float* w, TokenId* cand, int n, double target) {
  // Invariant: cand[0, lo) is in the set with weight `weight_before`, every element of
  // [lo, hi) beats every element of [hi, n), and the answer k lies in (lo, hi].
  int lo = 0;
  int hi = n;
  double weight_before = 0.0;
  while (hi - lo > 1) {
    // mid + 1 < hi, so both branches shrink the range.
    const int mid = lo + (hi - lo - 1) / 2;
    std::nth_element(cand + lo, cand + mid, cand + hi, ByValueThenId{w});
    double weight = weight_before;
    for (int i = lo; i <= mid; ++i) weight += w[cand[i]];
    if (weight >= target) {
      hi = mid + 1;
    } else {
      weight_before = weight;
      lo = mid + 1;
    }
  }
  return hi;
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0.0f) {
    return FieldError("temperature", "finite and >= 0", params.temperature);
  }
  if (params.top_k < 0) return FieldError("top_k", ">= 0", params.top_k);
  if (!std::isfinite(params.top_p) || params.top_p <= 0.0f || params.top_p > 1.0f) {
    return FieldError("top_p", "in (0, 1]", params.top_p);
  }
  if (!std::isfinite(params.min_p) || params.min_p < 0.0f || params.min_p > 1.0f) {
    return FieldError("min_p", "in [0, 1]", params.min_p);
  }
  if (!std::isfinite(params.repetition_penalty) || params.repetition_penalty <= 0.0f) {
    return FieldError("repetition_penalty", "finite and > 0", params.repetition_penalty);
  }
  if (!(std::fabs(params.frequency_penalty) <= kMaxOutputPenalty)) {  // also NaN
    return FieldError("frequency_penalty", "in [-2, 2]", params.frequency_penalty);
  }
  if (!(std::fabs(params.presence_penalty) <= kMaxOutputPenalty)) {
    return FieldError("presence_penalty", "in [-2, 2]", params.presence_penalty);
  }
  for (const LogitBias& entry : params.logit_bias) {
    if (entry.id < 0) return FieldError("logit_bias", "keyed by token ids >= 0", entry.id);
    if (!(std::fabs(entry.bias) <= kMaxLogitBias)) {
      return FieldError("logit_bias", "in [-100, 100]", entry.bias);
    }
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params, int vocab_size)
    : params_(params),
      rng_(params.seed),
      scratch_(std::max(vocab_size, 0)),
      candidates_(std::max(vocab_size, 0)),
      seen_(std::max(vocab_size, 0), 0),
      bucket_mass_(kHistograms * kNumBuckets, 0.0) {
  // Only a sequence that uses them pays for the counts (4 bytes per vocabulary entry).
  if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
    counts_.assign(std::max(vocab_size, 0), 0);
  }
}

double Sampler::NextUniform() {
  return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

void Sampler::ApplyLogitBias(float* x, int n) const {
  for (const LogitBias& entry : params_.logit_bias) {
    if (entry.id >= 0 && entry.id < n) x[entry.id] += entry.bias;
  }
}

void Sampler::ApplyRepetitionPenalty(absl::Span<const TokenId> prompt,
                                     absl::Span<const TokenId> output, float* x, int n) {
  // llama.cpp's rule, once per distinct token of the prompt and output.
  const float penalty = params_.repetition_penalty;
  for (absl::Span<const TokenId> tokens : {prompt, output}) {
    for (TokenId t : tokens) {
      if (t < 0 || t >= n || seen_[t]) continue;
      seen_[t] = 1;
      x[t] = x[t] > 0.0f ? x[t] / penalty : x[t] * penalty;
    }
  }
  for (absl::Span<const TokenId> tokens : {prompt, output}) {
    for (TokenId t : tokens) {
      if (t >= 0 && t < n) seen_[t] = 0;
    }
  }
}

void Sampler::ApplyOutputPenalties(absl::Span<const TokenId> output, float* x, int n) {
  // OpenAI's rule (as vLLM computes it): one multiply by the count, not a subtraction per
  // occurrence, so the rounding does not depend on the order of the output.
  for (TokenId t : output) {
    if (t >= 0 && t < n) ++counts_[t];
  }
  for (TokenId t : output) {
    if (t < 0 || t >= n || counts_[t] == 0) continue;
    x[t] = x[t] - static_cast<float>(counts_[t]) * params_.frequency_penalty -
           params_.presence_penalty;
    counts_[t] = 0;
  }
}

int Sampler::TopPOverVocabulary(const float* x, int n, TokenId* cand) {
  double total = 0.0;
  for (int b = 0; b < n; b += kDrawBlock) total += BlockSum(x + b, std::min(kDrawBlock, n - b));
  const double target = static_cast<double>(params_.top_p) * total;

  // A histogram by float bits (ordered like the values) finds the bucket where the
  // cumulative weight crosses the target. Interleaved copies break the add-to-the-same-
  // bucket dependency chains of flat distributions.
  std::fill(bucket_mass_.begin(), bucket_mass_.end(), 0.0);
  for (int i = 0; i < n; ++i) bucket_mass_[(i % kHistograms) * kNumBuckets + Bucket(x[i])] += x[i];
  auto mass = [&](int bucket) {
    double m = 0.0;
    for (int h = 0; h < kHistograms; ++h) m += bucket_mass_[h * kNumBuckets + bucket];
    return m;
  };
  double above = 0.0;  // weight of the buckets above `b`
  int b = kNumBuckets - 1;
  for (double m = mass(b); b > 0 && above + m < target; m = mass(--b)) above += m;

  // Branch-free split: ids above the bucket to the front (ascending), ids in it to the back.
  int front = 0;
  int back = n - 1;
  for (int i = 0; i < n; ++i) {
    const int bucket = Bucket(x[i]);
    cand[front] = i;
    cand[back] = i;
    front += bucket > b;
    back -= bucket == b;
  }
  // Inside the boundary bucket the exact rule decides; the winners follow in id order.
  TokenId* boundary = cand + back + 1;
  const int winners = SelectNucleus(x, boundary, n - 1 - back, target - above);
  std::sort(boundary, boundary + winners);
  std::copy(boundary, boundary + winners, cand + front);
  if (front + winners == 0) {  // only if rounding starved the target; keep the top token
    cand[0] = Argmax(x, n);
    return 1;
  }
  return front + winners;
}

void Sampler::SortIds(TokenId* cand, int kept, int n) {
  if (int64_t{kept} * 16 < n) {
    std::sort(cand, cand + kept);
    return;
  }
  // Many candidates: a linear pass over the vocabulary beats sorting.
  for (int i = 0; i < kept; ++i) seen_[cand[i]] = 1;
  int out = 0;
  for (int id = 0; id < n && out < kept; ++id) {
    if (seen_[id]) {
      seen_[id] = 0;
      cand[out++] = id;
    }
  }
}

TokenId Sampler::Sample(absl::Span<const float> logits, absl::Span<const TokenId> prompt,
                        absl::Span<const TokenId> output) {
  QUILL_DCHECK(logits.size() == scratch_.size());
  const int n = static_cast<int>(std::min(logits.size(), scratch_.size()));
  if (n == 0) return 0;
  float* x = scratch_.data();
  std::copy(logits.begin(), logits.begin() + n, x);
  if (!params_.logit_bias.empty()) ApplyLogitBias(x, n);
  if (params_.repetition_penalty != 1.0f) ApplyRepetitionPenalty(prompt, output, x, n);
  if (!counts_.empty()) ApplyOutputPenalties(output, x, n);
  if (params_.temperature == 0.0f) return Argmax(x, n);

  const float max_value = TemperAndMax(x, n, params_.temperature);
  // All -inf, or a +inf (tiny temperature): the distribution is degenerate; take the top.
  if (!std::isfinite(max_value)) return Argmax(x, n);

  TokenId* cand = candidates_.data();
  int kept = n;
  if (params_.top_k > 0 && params_.top_k < n) {
    std::iota(cand, cand + n, 0);
    kept = params_.top_k;
    std::nth_element(cand, cand + kept - 1, cand + n, ByValueThenId{x});
    // Weights in place: the top token's is exactly 1.
    double total = 0.0;
    for (int i = 0; i < kept; ++i) total += x[cand[i]] = ExpNonPositive(x[cand[i]] - max_value);
    if (params_.top_p < 1.0f) {
      kept = std::max(SelectNucleus(x, cand, kept, params_.top_p * total), 1);
    }
    // Ascending ids: the draw must not depend on how nth_element left the candidates.
    SortIds(cand, kept, n);
  } else {
    ExpWeights(x, n, max_value);
    if (params_.top_p < 1.0f) {
      kept = TopPOverVocabulary(x, n, cand);
    } else if (params_.min_p == 0.0f) {
      return DrawContiguous(x, n, NextUniform());  // the whole vocabulary
    } else {
      std::iota(cand, cand + n, 0);
    }
  }
  if (params_.min_p > 0.0f) {
    // p < min_p * p_max  <=>  weight < min_p, as p_max's weight is 1.
    int out = 0;
    for (int i = 0; i < kept; ++i) {
      if (x[cand[i]] >= params_.min_p) cand[out++] = cand[i];
    }
    kept = std::max(out, 1);  // the top token always passes; guard anyway
  }
  double total = 0.0;
  for (int i = 0; i < kept; ++i) total += x[cand[i]];
  const double u = NextUniform() * total;
  double cumulative = 0.0;
  for (int i = 0; i < kept; ++i) {
    cumulative += x[cand[i]];
    if (u < cumulative) return cand[i];
  }
  return cand[kept - 1];
}

float ComputeLogprobs(absl::Span<const float> logits, TokenId chosen, int top_n,
                      std::vector<TokenLogprob>* top) {
  const int n = static_cast<int>(logits.size());
  auto value = [&](int i) {
    return std::isnan(logits[i]) ? -std::numeric_limits<double>::infinity()
                                 : static_cast<double>(logits[i]);
  };
  double max_value = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) max_value = std::max(max_value, value(i));
  double sum = 0.0;
  if (std::isfinite(max_value)) {
    for (int i = 0; i < n; ++i) sum += std::exp(value(i) - max_value);
  }
  const double log_z = max_value + std::log(sum);
  auto logprob = [&](int i) { return static_cast<float>(value(i) - log_z); };

  if (top != nullptr) {
    const int k = std::clamp(top_n, 0, n);
    top->resize(k);
    // A heap of the k best so far, worst on top; `logprob` holds the raw logit meanwhile.
    auto better = [](const TokenLogprob& a, const TokenLogprob& b) {
      return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
    };
    if (k > 0) {
      for (int i = 0; i < k; ++i) (*top)[i] = {i, static_cast<float>(value(i))};
      std::make_heap(top->begin(), top->end(), better);
      for (int i = k; i < n; ++i) {
        const TokenLogprob c{i, static_cast<float>(value(i))};
        if (better(c, top->front())) {
          std::pop_heap(top->begin(), top->end(), better);
          top->back() = c;
          std::push_heap(top->begin(), top->end(), better);
        }
      }
      std::sort_heap(top->begin(), top->end(), better);
      for (TokenLogprob& t : *top) t.logprob = logprob(t.id);
    }
  }
  if (chosen < 0 || chosen >= n) return -std::numeric_limits<float>::infinity();
  return logprob(chosen);
}

}  // namespace quill::engine
