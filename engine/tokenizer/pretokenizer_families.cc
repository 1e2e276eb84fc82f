#include "engine/tokenizer/pretokenizer_families.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quill::engine {
namespace {

// GPT-2's pattern as OpenAI published it (encoder.py); GPT-NeoX, MPT and OLMo ship the
// same one in their ByteLevel pre-tokenizer.
constexpr absl::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3 (tokenizer.json): letters may take one leading non-letter, digits go in
// groups of up to three, punctuation keeps trailing newlines. The contractions are
// caseless as published; llama.cpp spells them '[sS]... (ASCII only), which differs only
// for U+017F (long s) after an apostrophe.
constexpr absl::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: Llama 3's pattern with single digits.
constexpr absl::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek LLM's Split sequence (tokenizer.json). Non-ASCII characters are written as
// \x{...} escapes so that no editor's Unicode normalization can change them (several
// range ends, e.g. U+1FD3 and U+2126, have singleton canonical decompositions).
// Letters: the cased letters (Lu, Ll, Lt) as explicit ranges.
constexpr absl::string_view kDeepSeekLlmLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})"
    R"(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
    R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
    R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})"
    R"(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943}]+)";
// ASCII punctuation and symbols, their fullwidth forms, curly quotes, CJK punctuation.
constexpr absl::string_view kDeepSeekLlmPunctuation =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
// CJK ideographs (U+4E00..U+9FA5), U+0800..U+4E00 and Hangul (U+AC00..U+D7FF).
constexpr absl::string_view kCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct Family {
  std::vector<absl::string_view> names;  // the first is canonical
  std::vector<absl::string_view> patterns;
  bool ignore_merges;
  bool add_bos;
};

// Names as llama.cpp's converter writes them to tokenizer.ggml.pre; families that share
// a pattern list share an entry. Multi-pattern lists (Falcon, StarCoder, DeepSeek) are
// llama.cpp's rendering of each family's Split sequence. "" and "default" take GPT-2's
// pattern: a gpt2 vocabulary that names no family is GPT-2's (llama.cpp instead applies a
// four-pattern approximation there and warns that quality will suffer).
const std::vector<Family>& Families() {
  static const auto* const kFamilies = new std::vector<Family>{
      {{"gpt-2", "default", "", "phi-2", "mpt", "gpt-neox", "olmo"}, {kGpt2}, false, false},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3"}, {kLlama3}, true, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}, false, false},
      {{"qwen2", "deepseek-r1-qwen"}, {kQwen2}, false, false},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone"},
       {R"(\p{N})", kGpt2},
       false,
       false},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, R"([0-9][0-9][0-9])"}, false, false},
      {{"deepseek-llm"},
       {R"([\r\n])", kDeepSeekLlmLetters, kDeepSeekLlmPunctuation, R"(\s+$)", kCjk, R"(\p{N}+)"},
       false,
       false},
      {{"deepseek-coder"},
       {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"},
       false,
       false},
  };
  return *kFamilies;
}

}  // namespace

absl::StatusOr<PreTokenizerSpec> FindPreTokenizerSpec(absl::string_view pre) {
  for (const Family& family : Families()) {
    for (absl::string_view name : family.names) {
      if (name != pre) continue;
      PreTokenizerSpec spec;
      spec.name = std::string(*family.names.begin());
      for (absl::string_view pattern : family.patterns) spec.patterns.emplace_back(pattern);
      spec.ignore_merges = family.ignore_merges;
      spec.add_bos = family.add_bos;
      return spec;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported pre-tokenizer '", pre,
                   "' (tokenizer.ggml.pre); supported: ", SupportedPreTokenizers()));
}

std::string SupportedPreTokenizers() {
  std::vector<absl::string_view> names;
  for (const Family& family : Families()) {
    for (absl::string_view name : family.names) {
      if (!name.empty()) names.push_back(name);
    }
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace quill::engine
