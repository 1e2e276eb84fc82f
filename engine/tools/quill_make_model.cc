// quill-make-model: writes a Llama-architecture GGUF file with random weights, for tests
// and benchmarks at real model shapes without downloading anything. Tensors are generated
// and written one at a time, so a multi-gigabyte model never sits in memory whole.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/gguf/tensor_encode.h"
#include "engine/model/model_config.h"
#include "engine/quant/quant_type.h"
#include "engine/tools/quant_recipe.h"

ABSL_FLAG(std::string, out, "", "Output GGUF path (required).");
ABSL_FLAG(int64_t, d_model, 2048, "Embedding width (llama.embedding_length).");
ABSL_FLAG(int64_t, layers, 22, "Number of transformer blocks.");
ABSL_FLAG(int64_t, heads, 32, "Attention heads.");
ABSL_FLAG(int64_t, kv_heads, 4, "Key/value heads (GQA); must divide --heads.");
ABSL_FLAG(int64_t, ffn, 5632, "SwiGLU hidden width (llama.feed_forward_length).");
ABSL_FLAG(int64_t, vocab, 0,
          "Vocabulary size. 0 = the token count of --tokenizer_from, or 32000 without it. "
          "With --tokenizer_from it must equal that file's token count.");
ABSL_FLAG(int64_t, context, 2048, "Context length (llama.context_length).");
ABSL_FLAG(std::string, type, "f16",
          "Type of the weight matrices: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, "
          "q5_k, q6_k, q4_k_m or q5_k_m (norms are always f32). The 4/5/6-bit types follow "
          "llama-quantize's recipes: the LM head in Q6_K, and for *_k_m attn_v and ffn_down "
          "of some layers in Q6_K too.");
ABSL_FLAG(bool, pure, false, "Every weight matrix in --type, the LM head included.");
ABSL_FLAG(uint64_t, seed, 1, "Random seed; the same flags and seed give the same file.");
ABSL_FLAG(std::string, tokenizer_from, "",
          "Copy every tokenizer.* key from this GGUF file (e.g. a shared model or vocab "
          "file). Without it a minimal SentencePiece-style vocabulary is written.");
ABSL_FLAG(double, rope_base, 10000.0, "RoPE frequency base (llama.rope.freq_base).");
ABSL_FLAG(double, rms_eps, 1e-5, "RMSNorm epsilon.");
ABSL_FLAG(double, weight_std, 0.02, "Standard deviation of the random weight matrices.");
ABSL_FLAG(bool, tied, false, "Omit output.weight (the LM head reuses token_embd.weight).");
ABSL_FLAG(std::string, name, "quill-random", "general.name.");

namespace quill::engine {
namespace {

constexpr int64_t kDefaultVocab = 32000;
constexpr int64_t kMinimalVocabFixed = 3 + 256;  // <unk> <s> </s> and the byte pieces
constexpr int64_t kChunkElements = int64_t{1} << 20;  // generated and encoded at a time

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Normal samples by Box-Muller over xoshiro256+ uniforms: fast enough to fill a
// 1B-parameter model in seconds, and fully determined by the seed.
class NormalGenerator {
 public:
  explicit NormalGenerator(uint64_t seed) {
    for (uint64_t& word : s_) word = SplitMix64(seed);
  }
  void Fill(float* out, int64_t n, float stddev) {
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
      float a, b;
      Pair(&a, &b);
      out[i] = a * stddev;
      out[i + 1] = b * stddev;
    }
    if (i < n) {
      float a, b;
      Pair(&a, &b);
      out[i] = a * stddev;
    }
  }

 private:
  uint64_t Next() {
    const uint64_t result = s_[0] + s_[3];
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = (s_[3] << 45) | (s_[3] >> 19);
    return result;
  }
  void Pair(float* a, float* b) {
    const uint64_t bits = Next();
    // Two 24-bit uniforms; u1 in (0, 1] keeps the log finite.
    const float u1 = (static_cast<float>(bits >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((bits >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
    const float r = std::sqrt(-2.0f * std::log(u1));
    const float theta = 6.28318530717958647692f * u2;
    *a = r * std::cos(theta);
    *b = r * std::sin(theta);
  }
  uint64_t s_[4];
};

struct Options {
  std::string out;
  int64_t d_model, layers, heads, kv_heads, ffn, vocab, context;
  tools::QuantRecipe recipe;
  uint64_t seed;
  std::string tokenizer_from;
  float rope_base, rms_eps, stddev;
  bool tied;
  std::string name;
};

// "▁a", "▁b", ..., "▁z", "▁aa", ...: distinct filler pieces.
std::string FillerPiece(int64_t index) {
  std::string letters;
  int64_t k = index;
  do {
    letters.insert(letters.begin(), static_cast<char>('a' + k % 26));
    k = k / 26 - 1;
  } while (k >= 0);
  return absl::StrCat("\xE2\x96\x81", letters);
}

// A self-contained llama (SentencePiece) vocabulary: <unk>, <s>, </s>, the 256 byte
// fallback pieces, then filler pieces up to `vocab`.
void WriteMinimalVocab(GgufWriter& w, int64_t vocab) {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  tokens.reserve(vocab);
  auto add = [&](std::string piece, float score, int32_t type) {
    tokens.push_back(std::move(piece));
    scores.push_back(score);
    types.push_back(type);
  };
  constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;
  add("<unk>", 0.0f, kUnknown);
  add("<s>", 0.0f, kControl);
  add("</s>", 0.0f, kControl);
  for (int b = 0; b < 256; ++b) add(absl::StrFormat("<0x%02X>", b), 0.0f, kByte);
  for (int64_t i = 0; static_cast<int64_t>(tokens.size()) < vocab; ++i) {
    add(FillerPiece(i), -static_cast<float>(i + 1), kNormal);
  }
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetString("tokenizer.ggml.pre", "default");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetFloat32Array("tokenizer.ggml.scores", scores);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  w.SetUint32("tokenizer.ggml.bos_token_id", 1);
  w.SetUint32("tokenizer.ggml.eos_token_id", 2);
  w.SetUint32("tokenizer.ggml.unknown_token_id", 0);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  w.SetBool("tokenizer.ggml.add_eos_token", false);
}

class ModelMaker {
 public:
  explicit ModelMaker(const Options& options) : o_(options), start_(Clock::now()) {}

  absl::Status Run() {
    GgufWriter w;
    QUILL_RETURN_IF_ERROR(SetMetadata(w));
    AddTensors(w);
    std::fprintf(stderr, "quill-make-model: writing %s (%s weights, %lld layers)\n", o_.out.c_str(),
                 o_.recipe.name.c_str(), static_cast<long long>(o_.layers));
    QUILL_RETURN_IF_ERROR(w.WriteFile(o_.out));
    return Verify();
  }

 private:
  using Clock = std::chrono::steady_clock;

  absl::Status SetMetadata(GgufWriter& w) {
    w.SetString("general.architecture", "llama");
    w.SetString("general.name", o_.name);
    w.SetUint32("general.file_type", o_.recipe.file_type);
    w.SetUint32("llama.context_length", static_cast<uint32_t>(o_.context));
    w.SetUint32("llama.embedding_length", static_cast<uint32_t>(o_.d_model));
    w.SetUint32("llama.block_count", static_cast<uint32_t>(o_.layers));
    w.SetUint32("llama.feed_forward_length", static_cast<uint32_t>(o_.ffn));
    w.SetUint32("llama.rope.dimension_count", static_cast<uint32_t>(o_.d_model / o_.heads));
    w.SetFloat32("llama.rope.freq_base", o_.rope_base);
    w.SetUint32("llama.attention.head_count", static_cast<uint32_t>(o_.heads));
    w.SetUint32("llama.attention.head_count_kv", static_cast<uint32_t>(o_.kv_heads));
    w.SetFloat32("llama.attention.layer_norm_rms_epsilon", o_.rms_eps);
    w.SetUint32("llama.vocab_size", static_cast<uint32_t>(o_.vocab));
    if (o_.tokenizer_from.empty()) {
      WriteMinimalVocab(w, o_.vocab);
      return absl::OkStatus();
    }
    QUILL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> source, GgufFile::Open(o_.tokenizer_from));
    return w.CopyKeys(*source, "tokenizer.");
  }

  // A weight matrix (random normal) or a norm vector (ones, F32).
  void Add(GgufWriter& w, const std::string& name, std::vector<int64_t> dims, bool is_norm,
           int64_t layer_done) {
    const uint64_t tensor_seed = o_.seed * 0x9E3779B97F4A7C15ull + (++tensor_index_);
    const GgmlType type =
        is_norm ? GgmlType::kF32 : tools::TensorTypeFor(o_.recipe, name, o_.layers, !o_.tied);
    int64_t elements = 1;
    for (int64_t d : dims) elements *= d;
    const float stddev = o_.stddev;
    w.AddStreamedTensor(name, type, std::move(dims),
                        [this, tensor_seed, type, elements, stddev, is_norm,
                         layer_done](std::vector<uint8_t>* out) -> absl::Status {
                          std::vector<float> chunk;
                          NormalGenerator rng(tensor_seed);
                          for (int64_t done = 0; done < elements; done += kChunkElements) {
                            const int64_t n = std::min(kChunkElements, elements - done);
                            chunk.resize(n);
                            if (is_norm) {
                              std::fill(chunk.begin(), chunk.end(), 1.0f);
                            } else {
                              rng.Fill(chunk.data(), n, stddev);
                            }
                            QUILL_RETURN_IF_ERROR(EncodeTensor(chunk, type, out));
                          }
                          bytes_ += out->size();
                          if (layer_done >= 0) ReportLayer(layer_done);
                          return absl::OkStatus();
                        });
  }

  void AddTensors(GgufWriter& w) {
    const int64_t d = o_.d_model;
    const int64_t head_dim = d / o_.heads;
    const int64_t kv_width = o_.kv_heads * head_dim;
    Add(w, "token_embd.weight", {d, o_.vocab}, false, -1);
    for (int64_t i = 0; i < o_.layers; ++i) {
      const std::string b = absl::StrCat("blk.", i, ".");
      Add(w, b + "attn_norm.weight", {d}, true, -1);
      Add(w, b + "attn_q.weight", {d, o_.heads * head_dim}, false, -1);
      Add(w, b + "attn_k.weight", {d, kv_width}, false, -1);
      Add(w, b + "attn_v.weight", {d, kv_width}, false, -1);
      Add(w, b + "attn_output.weight", {o_.heads * head_dim, d}, false, -1);
      Add(w, b + "ffn_norm.weight", {d}, true, -1);
      Add(w, b + "ffn_gate.weight", {d, o_.ffn}, false, -1);
      Add(w, b + "ffn_up.weight", {d, o_.ffn}, false, -1);
      Add(w, b + "ffn_down.weight", {o_.ffn, d}, false, i);
    }
    Add(w, "output_norm.weight", {d}, true, -1);
    if (!o_.tied) Add(w, "output.weight", {d, o_.vocab}, false, -1);
  }

  void ReportLayer(int64_t layer) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    std::fprintf(stderr, "  layer %lld/%lld generated (%.2f GB so far, %.1f s)\n",
                 static_cast<long long>(layer + 1), static_cast<long long>(o_.layers),
                 static_cast<double>(bytes_) / 1e9, seconds);
  }

  // Reopens the file with the validating reader, so a written model is a loadable model.
  absl::Status Verify() {
    QUILL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(o_.out));
    absl::StatusOr<ModelConfig> config = ModelConfig::FromGguf(*file);
    if (!config.ok()) {
      return absl::InternalError(
          absl::StrCat("the written file does not load back: ", config.status().ToString()));
    }
    const ModelAccounting a =
        ComputeAccounting(*config, config->context_length, kernels::KvElement::kF16);
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    std::fprintf(stderr,
                 "quill-make-model: wrote %s: %llu bytes, %lld tensors, %lld parameters "
                 "(%lld non-embedding), vocab %lld, %.1f s\n",
                 o_.out.c_str(), static_cast<unsigned long long>(file->file_size()),
                 static_cast<long long>(file->tensors().size()),
                 static_cast<long long>(a.total_params),
                 static_cast<long long>(a.non_embedding_params),
                 static_cast<long long>(config->vocab_size), seconds);
    return absl::OkStatus();
  }

  const Options o_;
  const Clock::time_point start_;
  uint64_t tensor_index_ = 0;
  uint64_t bytes_ = 0;
};

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  o.out = absl::GetFlag(FLAGS_out);
  if (o.out.empty()) return absl::InvalidArgumentError("--out is required");
  o.d_model = absl::GetFlag(FLAGS_d_model);
  o.layers = absl::GetFlag(FLAGS_layers);
  o.heads = absl::GetFlag(FLAGS_heads);
  o.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  o.ffn = absl::GetFlag(FLAGS_ffn);
  o.vocab = absl::GetFlag(FLAGS_vocab);
  o.context = absl::GetFlag(FLAGS_context);
  QUILL_ASSIGN_OR_RETURN(
      o.recipe, tools::ParseQuantRecipe(absl::GetFlag(FLAGS_type), absl::GetFlag(FLAGS_pure)));
  o.seed = absl::GetFlag(FLAGS_seed);
  o.tokenizer_from = absl::GetFlag(FLAGS_tokenizer_from);
  o.rope_base = static_cast<float>(absl::GetFlag(FLAGS_rope_base));
  o.rms_eps = static_cast<float>(absl::GetFlag(FLAGS_rms_eps));
  o.stddev = static_cast<float>(absl::GetFlag(FLAGS_weight_std));
  o.tied = absl::GetFlag(FLAGS_tied);
  o.name = absl::GetFlag(FLAGS_name);
  if (!(o.stddev > 0.0f) || !std::isfinite(o.stddev)) {
    return absl::InvalidArgumentError("--weight_std must be a positive number");
  }
  if (o.vocab < 0) return absl::InvalidArgumentError("--vocab must not be negative");

  if (!o.tokenizer_from.empty()) {
    QUILL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> source, GgufFile::Open(o.tokenizer_from));
    absl::StatusOr<uint64_t> tokens = source->GetArrayLength("tokenizer.ggml.tokens");
    if (!tokens.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--tokenizer_from ", o.tokenizer_from,
                                                     " has no usable tokenizer.ggml.tokens: ",
                                                     tokens.status().message()));
    }
    if (o.vocab == 0) o.vocab = static_cast<int64_t>(*tokens);
    if (o.vocab != static_cast<int64_t>(*tokens)) {
      return absl::InvalidArgumentError(absl::StrCat("--vocab ", o.vocab, " differs from the ",
                                                     *tokens, " tokens of ", o.tokenizer_from));
    }
  } else {
    if (o.vocab == 0) o.vocab = kDefaultVocab;
    if (o.vocab < kMinimalVocabFixed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--vocab ", o.vocab, " is too small for the built-in vocabulary (needs >= ",
          kMinimalVocabFixed, ": <unk>, <s>, </s> and 256 byte pieces)"));
    }
  }

  // The same checks the loader applies.
  ModelConfig config;
  config.architecture = "llama";
  config.vocab_size = o.vocab;
  config.embedding_length = o.d_model;
  config.block_count = o.layers;
  config.head_count = o.heads;
  config.head_count_kv = o.kv_heads;
  config.head_dim = o.heads > 0 ? o.d_model / o.heads : 0;
  config.feed_forward_length = o.ffn;
  config.rope_dimension_count = config.head_dim;
  config.rope_freq_base = o.rope_base;
  config.norm_eps = o.rms_eps;
  config.context_length = o.context;
  absl::Status valid = config.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid shape: ", valid.message()));
  }
  if (config.context_length > 0xFFFFFFFFll || config.vocab_size > 0xFFFFFFFFll) {
    return absl::InvalidArgumentError("--context and --vocab must fit in uint32");
  }
  // Every matrix's innermost dimension is d_model or ffn: whole blocks of every type used.
  for (const std::string name :
       {"blk.0.attn_q.weight", "blk.0.ffn_down.weight", "output.weight", "token_embd.weight"}) {
    const GgmlType type = tools::TensorTypeFor(o.recipe, name, o.layers, !o.tied);
    quant::QuantType q;
    if (!ToQuantType(type, &q)) continue;
    const int64_t block = quant::BlockElements(q);
    if (o.d_model % block != 0 || o.ffn % block != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--type ", o.recipe.name, " writes ", GgmlTypeName(type), ", which needs --d_model and ",
          "--ffn to be multiples of ", block, " (its block size)"));
    }
  }
  return o;
}

}  // namespace
}  // namespace quill::engine

int main(int argc, char** argv) {
  // --help lists this file's flags (absl matches on the binary name, which has dashes).
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "quill_make_model.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(
      "Writes a Llama-architecture GGUF model with random weights (normal, std 0.02; norms "
      "1.0) at any shape.\n\n"
      "Usage: quill-make-model --out PATH [shape flags] [--type f16|bf16|q8_0|q4_k_m|...]\n"
      "                        [--tokenizer_from OTHER.gguf] [--seed N]\n\n"
      "The defaults are the TinyLlama 1.1B shape (d_model 2048, 22 layers, 32 heads / 4 KV "
      "heads, ffn 5632, vocab 32000, context 2048). Examples:\n"
      "  quill-make-model --out /tmp/tl.gguf --type bf16 \\\n"
      "      --tokenizer_from ../shared/models/mini-random-bf16.gguf\n"
      "  quill-make-model --out /tmp/small.gguf --d_model 256 --layers 4 --heads 8 "
      "--kv_heads 2 --ffn 768 --vocab 512 --type q8_0\n\n"
      "Tensors are generated and streamed to disk one at a time (progress per layer on "
      "stderr); the file is written to PATH.tmp and renamed when complete, then reopened "
      "with Quill's validating reader.");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "quill-make-model: error: unexpected argument '%s' (see --help)\n",
                 positional[1]);
    return 2;
  }
  absl::StatusOr<quill::engine::Options> options = quill::engine::OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "quill-make-model: error: %s (see --help)\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  quill::engine::ModelMaker maker(*options);
  absl::Status status = maker.Run();
  if (!status.ok()) {
    std::fprintf(stderr, "quill-make-model: error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
