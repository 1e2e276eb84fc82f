#pragma once

namespace quill::engine::tools {

// The dot-product instruction a matmul's inner loop is built on, by weight type: AVX-512
// FMA for f32 (exact mode, F32 weights), AVX512-BF16 vdpbf16ps for BF16/F16 in fast mode,
// AVX512-VNNI vpdpbusd for Q8_0 and the block types.
enum class DotKind { kF32Fma, kBf16Dot, kInt8Dot };

const char* DotKindName(DotKind kind);  // "f32 FMA", "bf16 dot", "int8 dot"

// The machine's peak rate of `kind` in operations/s (a multiply-add counts 2) with the
// current OpenMP thread count: every thread runs independent chains of the instruction on
// registers, best of `reps` runs of ~`millis` ms. A batched decode step compares its
// matmul work with this, as a decode token compares its bytes with the read bandwidth.
// Returns 0 where the CPU lacks the instruction (AVX-512F, BF16 or VNNI).
double MeasureComputePeak(DotKind kind, int reps = 5, int millis = 20);

}  // namespace quill::engine::tools
