#pragma once

#include <cstdint>
#include <string_view>

namespace quill::engine::kernels {

// How the paged KV cache stores a K or V value. Exact mode keeps f32 so that its logits
// stay bit-exact; fast mode stores IEEE f16 by default, which halves both the cache's
// memory and the bytes a long context's decode step reads (at 4,096 keys, attention reads
// more than the weights of a 1B model in Q4). kQ8 (fast mode, opt-in) halves them again:
// each key and value row of a KV head is stored as int8 codes with one f32 scale (the
// row's largest magnitude / 127, codes rounded to nearest), and attention quantizes each
// query head the same way to form its scores with integer dot products. kBf16 (fast mode,
// opt-in) takes f16's bytes but bfloat16's 8-bit mantissa, and in exchange attention
// computes in bf16 dot products (vdpbf16ps: two multiply-adds per lane and instruction, no
// widening): the query and the softmax weights are rounded to bf16 too, as fast mode's
// matmuls round their activations.
enum class KvElement : uint8_t { kF32, kF16, kQ8, kBf16 };

// The widest head a q8 row (and attention) handles.
inline constexpr int kMaxKvHeadDim = 256;

// Bytes of one stored value (a q8 row's scale comes on top: KvRowBytes).
inline int KvElementBytes(KvElement e) {
  switch (e) {
    case KvElement::kF32:
      return 4;
    case KvElement::kF16:
    case KvElement::kBf16:
      return 2;
    case KvElement::kQ8:
      break;
  }
  return 1;
}
inline const char* KvElementName(KvElement e) {
  switch (e) {
    case KvElement::kF32:
      return "f32";
    case KvElement::kF16:
      return "f16";
    case KvElement::kBf16:
      return "bf16";
    case KvElement::kQ8:
      break;
  }
  return "q8";
}
// The element KvElementName calls `name` ("f32", "f16", "q8", "bf16"); false for any other.
inline bool KvElementFromName(std::string_view name, KvElement* out) {
  for (KvElement e : {KvElement::kF32, KvElement::kF16, KvElement::kQ8, KvElement::kBf16}) {
    if (name == KvElementName(e)) {
      *out = e;
      return true;
    }
  }
  return false;
}
// Elements beside a head_dim row that hold its scale: 4 (one f32) for q8, else none.
inline int KvScaleElements(KvElement e) { return e == KvElement::kQ8 ? 4 : 0; }
// Bytes one token's key (or value) of one KV head takes in the cache.
inline int64_t KvRowBytes(KvElement e, int head_dim) {
  return int64_t{head_dim} * KvElementBytes(e) + KvScaleElements(e);
}

// Layout of one layer's paged K and V arenas, both made of num_blocks blocks of block_size
// token slots. A sequence's block table maps its logical block i (positions
// [i*block_size, (i+1)*block_size)) to a physical block id; slot = id * block_size + i.
// A block holds its slots' keys (or values) of every KV head, one head's part after another,
// so that attention with one KV head reads each block's part as one run (2 KB for f16, 16
// slots, head_dim 64). Indices count elements (bytes for q8). Blocks outermost: a
// head-major arena ([num_kv_heads][num_blocks]..., each head's parts of consecutive blocks
// one run) took 0.82-0.85x the time for one sequence at 4,096 keys over 22 layers when its
// blocks were consecutive, but 1.2-1.4x for 16 and 64 sequences of 512 keys whose blocks
// were scattered (quill-attention-bench, f16), where a block's parts are read together.
//  - V: [num_blocks][num_kv_heads][block_size][head_dim]. Value rows of all heads side by
//    side ([num_blocks][block_size][num_kv_heads * head_dim]) made a head's rows 128-byte
//    pieces 512 bytes apart, which fall into a quarter of the L1 cache's sets. This layout
//    took 0.79-0.82x the time of that one in quill-attention-bench decode 64 x 512 (f16;
//    f32 0.83-0.85x) and 0.93x in 16 x 512; one sequence at 4,096 keys over 22 layers
//    1.01-1.10x (2 runs), over 128 layers 1.00-1.03x; the other cases 0.98-1.03x.
//  - K: [num_blocks][num_kv_heads][head_dim][block_size], each head's part transposed, so
//    that one K column of a block's keys is contiguous: a score over 16 keys is then one
//    chain of FMAs over head_dim with the keys in lanes, and no cross-lane reduction.
//  - q8: K is [head_dim / 4][block_size][4] in each head's part (4 dimensions of a key
//    side by side: one VNNI dot-product step, with 16 keys in one 64-byte line), stored
//    offset by +128 as unsigned bytes; V is signed bytes as above. Each head's part ends
//    with its block_size f32 scales, slot order (needs head_dim % 4 == 0).
//  - bf16: K is [head_dim / 2][block_size][2] in each head's part (a key's dimensions 2e and
//    2e+1 side by side: one vdpbf16ps step, with 16 keys in one 64-byte line), and V is
//    [block_size / 2][head_dim][2]: the values of two neighbouring slots side by side, so
//    that one step weighs a pair of keys (needs head_dim % 2 == 0 and an even block size).
struct KvLayout {
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
  KvElement element = KvElement::kF32;

  // Elements of one KV head's row of a token, scale included.
  int64_t head_row() const { return int64_t{head_dim} + KvScaleElements(element); }
  int64_t row() const { return num_kv_heads * head_row(); }
  // Elements from one KV head's part of a block to the next's, in K and in V.
  int64_t head_stride() const { return int64_t{block_size} * head_row(); }
  // Element index of dimension d of KV head `kv`'s key in `slot`.
  int64_t KeyIndex(int64_t slot, int kv, int d) const {
    const int64_t part = slot / block_size * block_size * row() + kv * head_stride();
    if (element == KvElement::kQ8) {
      return part + int64_t{d / 4} * block_size * 4 + slot % block_size * 4 + d % 4;
    }
    if (element == KvElement::kBf16) {
      return part + int64_t{d / 2} * block_size * 2 + slot % block_size * 2 + d % 2;
    }
    return part + int64_t{d} * block_size + slot % block_size;
  }
  // Element index of dimension d of KV head `kv`'s value in `slot`.
  int64_t ValueIndex(int64_t slot, int kv, int d) const {
    const int64_t part = slot / block_size * block_size * row() + kv * head_stride();
    if (element == KvElement::kBf16) {
      const int in_block = static_cast<int>(slot % block_size);
      return part + int64_t{in_block / 2} * head_dim * 2 + d * 2 + in_block % 2;
    }
    return part + slot % block_size * head_dim + d;
  }
  // Element index of the f32 scale of KV head `kv`'s key or value in `slot` (q8 only; the
  // same in K and V).
  int64_t ScaleIndex(int64_t slot, int kv) const {
    return slot / block_size * block_size * row() + kv * head_stride() +
           int64_t{block_size} * head_dim + slot % block_size * 4;
  }
};

// Stores KV head `kv`'s key (head_dim floats) for `slot` into the K arena, and its value
// into the V arena, in the layout's element:
//  - f32: a copy.
//  - f16: rounded to nearest even, with values beyond the f16 range saturated to +-65504
//    (an infinity would turn every later softmax over that key into NaN). NaN stays NaN.
//  - q8: values clamped to +-65504 as for f16, then codes round(x * 127 / max|x|) and the
//    scale max|x| / 127 (a row with max|x| < 1e-30, zeros included: codes and scale 0). A
//    NaN makes the scale NaN.
//  - bf16: rounded to nearest even, values beyond the bf16 range saturated to its largest
//    finite value (+-3.3895e38) for the same reason as f16's. NaN stays NaN.
void StoreKey(const float* row, const KvLayout& layout, void* k_arena, int64_t slot, int kv);
void StoreValue(const float* row, const KvLayout& layout, void* v_arena, int64_t slot, int kv);

// Stores n floats at element `offset` of an arena of f32 or f16 elements (not q8 or bf16,
// whose layouts are not element-wise) (as StoreValue does); the benches and tests fill whole
// arenas with it.
void StoreKvRow(const float* row, int64_t n, KvElement element, void* arena, int64_t offset);

// The same conversion, storing value i at element offset + i * stride: a key's column in
// a transposed K block (KvLayout::KeyIndex).
void StoreKvStrided(const float* row, int64_t n, KvElement element, void* arena, int64_t offset,
                    int64_t stride);

// Quantizes n values as a q8 row: codes[i] = round(x[i] * 127 / max|x|) in [-127, 127];
// returns the scale (max|x| / 127 after clamping to +-65504; 0 with all codes 0 when max|x|
// < 1e-30, NaN if x holds a NaN). Attention quantizes its query heads with it too.
float QuantizeRowQ8(const float* x, int64_t n, int8_t* codes);

}  // namespace quill::engine::kernels
