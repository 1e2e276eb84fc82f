#include "engine/quant/block_layout.h"

#include <cstring>

namespace quill::engine::quant {
namespace {

// 32 values of 4 bits: byte j holds value j (low nibble) and value j + 16 (high nibble).
void Unpack4x32(const uint8_t* qs, uint8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0x0F;
    q[j + 16] = qs[j] >> 4;
  }
}

void Pack4x32(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

// The 5th bits of 32 values: bit j of a little-endian uint32.
void AddHighBits32(const uint8_t* qh, uint8_t* q) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  for (int j = 0; j < 32; ++j) q[j] |= static_cast<uint8_t>(((bits >> j) & 1) << 4);
}

void PackHighBits32(const uint8_t* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < 32; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, 4);
}

// Q4_K/Q5_K low nibbles: 4 chunks of 64 values; byte l of chunk c holds value 64c + l (low
// nibble) and value 64c + 32 + l (high nibble).
void UnpackK4(const uint8_t* qs, uint8_t* q) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = qs[32 * c + l] & 0x0F;
      q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
    }
}

void PackK4(const uint8_t* q, uint8_t* qs) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] =
          static_cast<uint8_t>((q[64 * c + l] & 0x0F) | ((q[64 * c + 32 + l] & 0x0F) << 4));
}

// Q6_K: two halves of 128 values (ql: 64 bytes, qh: 32 bytes each). For l < 32, ql[l] holds
// the low nibbles of values l (low) and l + 64 (high), ql[l + 32] those of values l + 32 and
// l + 96, and qh[l] the 2-bit highs of values l, l + 32, l + 64, l + 96 (bits 0, 2, 4, 6).
void UnpackQ6K(const uint8_t* block, uint8_t* q) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = block + 64 * h;
    const uint8_t* qh = block + 128 + 32 * h;
    uint8_t* out = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      out[l] = static_cast<uint8_t>((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4));
      out[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
      out[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      out[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

void PackQ6K(const uint8_t* q, uint8_t* block) {
  for (int h = 0; h < 2; ++h) {
    uint8_t* ql = block + 64 * h;
    uint8_t* qh = block + 128 + 32 * h;
    const uint8_t* in = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((in[l] & 0x0F) | ((in[l + 64] & 0x0F) << 4));
      ql[l + 32] = static_cast<uint8_t>((in[l + 32] & 0x0F) | ((in[l + 96] & 0x0F) << 4));
      qh[l] = static_cast<uint8_t>((in[l] >> 4) | ((in[l + 32] >> 4) << 2) |
                                   ((in[l + 64] >> 4) << 4) | ((in[l + 96] >> 4) << 6));
    }
  }
}

bool Fp16Finite(const uint8_t* p) { return (LoadU16(p) & 0x7C00) != 0x7C00; }

}  // namespace

BlockFields FieldsOf(QuantType type) {
  BlockFields f;
  switch (type) {
    case QuantType::kQ4_0:
    case QuantType::kQ5_0:
    case QuantType::kQ8_0:
      f.d = 0;
      break;
    case QuantType::kQ4_1:
    case QuantType::kQ5_1:
      f.d = 0;
      f.m = 2;
      break;
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
      f.d = 0;
      f.m = 2;
      f.scales = 4;
      break;
    case QuantType::kQ6_K:
      f.scales = 192;
      f.d = 208;
      break;
  }
  return f;
}

void UnpackQuants(QuantType type, const uint8_t* block, uint8_t* q) {
  switch (type) {
    case QuantType::kQ4_0:
      Unpack4x32(block + 2, q);
      return;
    case QuantType::kQ4_1:
      Unpack4x32(block + 4, q);
      return;
    case QuantType::kQ5_0:
      Unpack4x32(block + 6, q);
      AddHighBits32(block + 2, q);
      return;
    case QuantType::kQ5_1:
      Unpack4x32(block + 8, q);
      AddHighBits32(block + 4, q);
      return;
    case QuantType::kQ8_0:
      for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(block[2 + j] ^ 0x80);
      return;
    case QuantType::kQ4_K:
      UnpackK4(block + 16, q);
      return;
    case QuantType::kQ5_K: {
      UnpackK4(block + 48, q);
      // Value e's 5th bit is bit e / 32 of qh[e % 32].
      const uint8_t* qh = block + 16;
      for (int e = 0; e < kSuperBlock; ++e)
        q[e] |= static_cast<uint8_t>(((qh[e % 32] >> (e / 32)) & 1) << 4);
      return;
    }
    case QuantType::kQ6_K:
      UnpackQ6K(block, q);
      return;
  }
}

void PackQuants(QuantType type, const uint8_t* q, uint8_t* block) {
  switch (type) {
    case QuantType::kQ4_0:
      Pack4x32(q, block + 2);
      return;
    case QuantType::kQ4_1:
      Pack4x32(q, block + 4);
      return;
    case QuantType::kQ5_0:
      Pack4x32(q, block + 6);
      PackHighBits32(q, block + 2);
      return;
    case QuantType::kQ5_1:
      Pack4x32(q, block + 8);
      PackHighBits32(q, block + 4);
      return;
    case QuantType::kQ8_0:
      for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<uint8_t>(q[j] ^ 0x80);
      return;
    case QuantType::kQ4_K:
      PackK4(q, block + 16);
      return;
    case QuantType::kQ5_K: {
      PackK4(q, block + 48);
      uint8_t* qh = block + 16;
      std::memset(qh, 0, 32);
      for (int e = 0; e < kSuperBlock; ++e)
        qh[e % 32] |= static_cast<uint8_t>(((q[e] >> 4) & 1) << (e / 32));
      return;
    }
    case QuantType::kQ6_K:
      PackQ6K(q, block);
      return;
  }
}

// Sub-blocks 0..3 keep their 6 bits in the low bits of bytes j (scale) and j + 4 (min);
// sub-blocks 4..7 keep their low 4 bits in byte j + 4 (scale low, min high nibble) and their
// top 2 bits in the top bits of bytes j - 4 (scale) and j (min).
void UnpackScaleMin(const uint8_t* s, int j, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

void PackScaleMins(const uint8_t* scales, const uint8_t* mins, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const uint8_t sc = scales[j] & 63, m = mins[j] & 63;
    if (j < 4) {
      s[j] |= sc;
      s[j + 4] |= m;
    } else {
      s[j + 4] = static_cast<uint8_t>((sc & 0x0F) | ((m & 0x0F) << 4));
      s[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
      s[j] |= static_cast<uint8_t>((m >> 4) << 6);
    }
  }
}

int64_t FindNonFiniteScale(QuantType type, const uint8_t* data, int64_t blocks) {
  const BlockFields f = FieldsOf(type);
  const int bytes = BlockBytes(type);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = data + b * bytes;
    if (!Fp16Finite(block + f.d) || (f.m >= 0 && !Fp16Finite(block + f.m))) return b;
  }
  return -1;
}

}  // namespace quill::engine::quant
