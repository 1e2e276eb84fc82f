// quill-quantize: re-encodes the weight matrices of a GGUF model.
//
//   quill-quantize IN.gguf OUT.gguf TYPE [--pure]
//
// TYPE is one of engine/tools/quant_recipe.h's recipes (q4_k_m, q4_0, q8_0, f16, ...). Every
// 2-D tensor whose name ends in "weight" is widened exactly to f32 (from F32, F16, BF16 or
// any block type Quill reads) and encoded with the reference rounding; other tensors and
// all metadata are copied, with general.file_type set to TYPE's. Exit codes: 0 ok, 1 error,
// 2 usage.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/float16.h"
#include "engine/base/status_macros.h"
#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/gguf/tensor_encode.h"
#include "engine/quant/dequantize.h"
#include "engine/tools/quant_recipe.h"

ABSL_FLAG(bool, pure, false, "Every weight matrix in TYPE, the LM head included.");

namespace quill::engine {
namespace {

// Rows of a tensor widened to f32 at a time (bounds memory for big embeddings).
constexpr int64_t kChunkElements = int64_t{1} << 22;

// Elements [first, first + count) of `t` (whole blocks) as f32, exactly.
absl::Status Widen(const GgufTensorInfo& t, int64_t first, int64_t count, float* out) {
  switch (t.type) {
    case GgmlType::kF32:
      std::memcpy(out, t.data + 4 * first, 4 * count);
      return absl::OkStatus();
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        const uint8_t* p = t.data + 2 * (first + i);
        const uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
        out[i] = t.type == GgmlType::kF16 ? Fp16ToFloat(h) : Bf16ToFloat(h);
      }
      return absl::OkStatus();
    default:
      break;
  }
  quant::QuantType q;
  if (!ToQuantType(t.type, &q)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has type ",
                                                   GgmlTypeName(t.type),
                                                   ", which quill-quantize cannot read"));
  }
  const int64_t block = quant::BlockElements(q);
  quant::Dequantize(q, t.data + first / block * quant::BlockBytes(q), count / block, out);
  return absl::OkStatus();
}

bool IsWeightMatrix(const GgufTensorInfo& t) {
  int64_t non_unit = 0;
  for (int64_t d : t.dims) non_unit += d > 1;
  return absl::EndsWith(t.name, "weight") && t.dims.size() >= 2 && non_unit >= 2;
}

absl::Status Quantize(const std::string& in, const std::string& out, const std::string& type) {
  QUILL_ASSIGN_OR_RETURN(tools::QuantRecipe recipe,
                         tools::ParseQuantRecipe(type, absl::GetFlag(FLAGS_pure)));
  QUILL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> src, GgufFile::Open(in));
  int64_t layers = 0;
  if (auto arch = src->GetString("general.architecture"); arch.ok()) {
    if (auto n = src->GetUint(absl::StrCat(*arch, ".block_count")); n.ok()) layers = *n;
  }
  const bool has_output = src->FindTensor("output.weight") != nullptr;

  GgufWriter w;
  QUILL_RETURN_IF_ERROR(w.CopyKeys(*src, ""));
  w.SetUint32("general.file_type", recipe.file_type);
  uint64_t in_bytes = 0, out_bytes = 0;
  int quantized = 0;
  for (const GgufTensorInfo& t : src->tensors()) {
    in_bytes += t.size_bytes;
    if (!IsWeightMatrix(t)) {
      w.AddStreamedTensor(t.name, t.type, t.dims, [&t](std::vector<uint8_t>* bytes) {
        bytes->assign(t.data, t.data + t.size_bytes);
        return absl::OkStatus();
      });
      out_bytes += t.size_bytes;
      continue;
    }
    const GgmlType target = tools::TensorTypeFor(recipe, t.name, layers, has_output);
    QUILL_ASSIGN_OR_RETURN(GgmlTensorSize size, ComputeGgmlTensorSize(target, t.dims));
    if (!size.num_elements) return absl::InternalError("empty tensor");
    ++quantized;
    out_bytes += size.size_bytes;
    w.AddStreamedTensor(t.name, target, t.dims, [&t, target](std::vector<uint8_t>* bytes) {
      // Chunks of whole rows, so every chunk is whole blocks of both types.
      const int64_t row = t.dims[0];
      const int64_t chunk = std::max<int64_t>(1, kChunkElements / row) * row;
      std::vector<float> values;
      for (int64_t first = 0; first < t.num_elements; first += chunk) {
        const int64_t count = std::min(chunk, t.num_elements - first);
        values.resize(count);
        QUILL_RETURN_IF_ERROR(Widen(t, first, count, values.data()));
        absl::Status s = EncodeTensor(values, target, bytes);
        if (!s.ok())
          return absl::Status(s.code(), absl::StrCat("tensor '", t.name, "': ", s.message()));
      }
      return absl::OkStatus();
    });
  }
  std::fprintf(stderr, "quill-quantize: %s -> %s (%s): %d weight matrices re-encoded\n", in.c_str(),
               out.c_str(), recipe.name.c_str(), quantized);
  QUILL_RETURN_IF_ERROR(w.WriteFile(out));
  // The written file must open with the validating reader.
  QUILL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> check, GgufFile::Open(out));
  std::fprintf(stderr, "quill-quantize: tensor data %.2f MB -> %.2f MB (%.2f%%), file %llu bytes\n",
               in_bytes / 1e6, out_bytes / 1e6, 100.0 * out_bytes / std::max<uint64_t>(1, in_bytes),
               static_cast<unsigned long long>(check->file_size()));
  return absl::OkStatus();
}

}  // namespace
}  // namespace quill::engine

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(absl::StrCat(
      "re-encodes a GGUF model's weight matrices.\n\n"
      "  quill-quantize IN.gguf OUT.gguf TYPE [--pure]\n\n"
      "TYPE: ",
      quill::engine::tools::QuantRecipeNames(),
      ".\nThe 4/5/6-bit types follow llama-quantize's recipes (LM head in Q6_K; *_k_m also "
      "attn_v and ffn_down of some layers); --pure writes every matrix in TYPE. Rounding is "
      "ggml's reference quantizers' (no importance matrix)."));
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 4) {
    std::fprintf(stderr, "usage: quill-quantize IN.gguf OUT.gguf TYPE [--pure] (see --help)\n");
    return 2;
  }
  const absl::Status s = quill::engine::Quantize(args[1], args[2], args[3]);
  if (!s.ok()) {
    std::fprintf(stderr, "quill-quantize: error: %s\n", s.ToString().c_str());
    return absl::IsInvalidArgument(s) && absl::StrContains(s.message(), "is not one of") ? 2 : 1;
  }
  return 0;
}
