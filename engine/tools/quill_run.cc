// quill-run: generate text from a GGUF model on the command line.
//
//   quill-run -m MODEL.gguf -p "PROMPT" -n 64 --temp 0
//   quill-run -m MODEL.gguf --render-chat MESSAGES.json      # prints the chat prompt
//
// Exit codes: 0 ok, 1 internal error, 2 usage, 3 model load error, 4 bad prompt,
// 5 chat template error.

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"
#include "engine/base/status_macros.h"
#include "engine/base/utf8.h"
#include "engine/chat/chat_template.h"
#include "engine/gguf/gguf_file.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/sampler/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tools/tool_flags.h"

ABSL_FLAG(std::string, model, "", "Path to a GGUF model (alias -m).");
ABSL_FLAG(std::string, prompt, "", "Prompt text (alias -p).");
ABSL_FLAG(std::string, prompt_ids, "",
          "Comma-separated prompt token ids (--prompt-ids 1,2,3); used instead of --prompt.");
ABSL_FLAG(int, n_predict, 64, "Number of tokens to generate (alias -n).");
ABSL_FLAG(double, temp, 0.8, "Sampling temperature; 0 = greedy.");
ABSL_FLAG(int, top_k, 40, "Top-k sampling (0 = off).");
ABSL_FLAG(double, top_p, 0.95, "Top-p (nucleus) sampling, in (0, 1].");
ABSL_FLAG(double, min_p, 0.05, "Min-p sampling, in [0, 1].");
ABSL_FLAG(double, repeat_penalty, 1.0, "Repetition penalty over prompt and output (1 = off).");
ABSL_FLAG(double, frequency_penalty, 0.0,
          "OpenAI's frequency penalty in [-2, 2]: a token's logit loses this much per time it "
          "was generated (0 = off).");
ABSL_FLAG(double, presence_penalty, 0.0,
          "OpenAI's presence penalty in [-2, 2]: a token's logit loses this much once it was "
          "generated (0 = off).");
ABSL_FLAG(std::string, logit_bias, "",
          "Biases added to token logits, ID=BIAS comma-separated with BIAS in [-100, 100] "
          "(e.g. 13=-100 bans token 13).");
ABSL_FLAG(int64_t, seed, -1, "Sampling seed (-1 = random).");
ABSL_FLAG(int, threads, 0,
          "OpenMP threads (alias -t); 0 = $OMP_NUM_THREADS if set, else the number of CPUs.");
ABSL_FLAG(int, ctx, 0, "Context size in tokens (0 = the model's context length).");
ABSL_FLAG(int, batch, 512, "Most tokens per forward step (prompt chunk size).");
ABSL_FLAG(bool, exact, false,
          "Exact mode: f32 activations and accumulation, weights widened exactly "
          "(default: fast bf16/int8 kernels).");
ABSL_FLAG(bool, ids, false, "Print the generated token ids (comma-separated) instead of text.");
ABSL_FLAG(bool, tokenize, false,
          "Print the prompt's token ids (BOS included when the vocabulary adds it) and exit. "
          "Works on vocabulary-only GGUF files.");
ABSL_FLAG(bool, echo, false, "Print the prompt before its continuation.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating after an end-of-generation token.");
ABSL_FLAG(bool, info, false,
          "Print the model's architecture, sizes, parameter counts, FLOPs and KV bytes per "
          "token, and exit.");
ABSL_FLAG(int64_t, info_context, 0, "Context assumed by --info's FLOPs figure (0 = the model's).");
ABSL_FLAG(bool, stats, true, "Print timing statistics to stderr after generating.");
ABSL_FLAG(std::string, render_chat, "",
          "Render MESSAGES.json (an OpenAI-style [{\"role\": ..., \"content\": ...}] array; - "
          "for stdin) with the chat template, print the prompt exactly (nothing added) and "
          "exit. Needs -m (the GGUF's tokenizer.chat_template and BOS/EOS text; no weights are "
          "loaded, so vocabulary-only files work) or --chat-template.");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file for --render-chat, instead of the model's. Without -m, "
          "bos_token is <s> and eos_token is </s>.");
ABSL_FLAG(bool, generation_prompt, true,
          "--render-chat: set add_generation_prompt (--no-generation-prompt clears it).");
ABSL_FLAG(std::string, template_date, "",
          "--render-chat: the date strftime_now() sees, YYYY-MM-DD (default: today).");

namespace quill::engine {
namespace {

enum ExitCode {
  kOk = 0,
  kInternal = 1,
  kUsage = 2,
  kLoadError = 3,
  kBadPrompt = 4,
  kTemplateError = 5,
};

int Fail(int code, absl::string_view message) {
  std::fflush(stdout);
  std::fprintf(stderr, "quill-run: %.*s\n", static_cast<int>(message.size()), message.data());
  return code;
}

std::string Commas(int64_t v) {
  std::string s = absl::StrCat(v < 0 ? -v : v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
  return v < 0 ? "-" + s : s;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::FILE* f = path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string data;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  if (f != stdin) std::fclose(f);
  if (failed) return absl::DataLossError(absl::StrCat("error reading ", path));
  return data;
}

// The text of token `key` (tokenizer.ggml.bos_token_id / eos_token_id), or nullopt when
// the vocabulary has no such token (the template then sees it undefined).
absl::StatusOr<std::optional<std::string>> SpecialTokenText(const GgufFile& file,
                                                            const std::vector<std::string>& tokens,
                                                            const std::string& key) {
  if (!file.HasKey(key)) return std::optional<std::string>();
  QUILL_ASSIGN_OR_RETURN(const int64_t id, file.GetInt(key));
  if (id < 0 || id >= static_cast<int64_t>(tokens.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " = ", id, " is outside the vocabulary of ", tokens.size()));
  }
  return std::optional<std::string>(tokens[id]);
}

// --render-chat: the template from --chat-template or the GGUF, BOS/EOS text from the
// GGUF (or <s> and </s> without a model), the rendered prompt on stdout and nothing else.
int RunRenderChat(const std::string& model_path) {
  const std::string template_path = absl::GetFlag(FLAGS_chat_template);
  if (model_path.empty() && template_path.empty()) {
    return Fail(kUsage, "--render-chat needs -m MODEL.gguf or --chat-template FILE");
  }
  chat::ChatRenderOptions options;
  options.add_generation_prompt = absl::GetFlag(FLAGS_generation_prompt);
  if (const std::string date = absl::GetFlag(FLAGS_template_date); !date.empty()) {
    absl::CivilDay day;
    if (!absl::ParseCivilTime(date, &day)) {
      return Fail(kUsage, absl::StrCat("--template-date must be YYYY-MM-DD, got '", date, "'"));
    }
    options.date = day;
  }
  std::string source;
  if (!model_path.empty()) {
    auto file = GgufFile::Open(model_path);
    if (!file.ok()) return Fail(kLoadError, file.status().ToString());
    if ((*file)->HasKey("tokenizer.ggml.tokens")) {
      auto tokens = (*file)->GetStringArray("tokenizer.ggml.tokens");
      if (!tokens.ok()) return Fail(kLoadError, tokens.status().ToString());
      auto bos = SpecialTokenText(**file, *tokens, "tokenizer.ggml.bos_token_id");
      auto eos = SpecialTokenText(**file, *tokens, "tokenizer.ggml.eos_token_id");
      if (!bos.ok()) return Fail(kLoadError, bos.status().ToString());
      if (!eos.ok()) return Fail(kLoadError, eos.status().ToString());
      options.bos_token = *bos;
      options.eos_token = *eos;
    } else {
      options.bos_token.reset();
      options.eos_token.reset();
    }
    if (template_path.empty()) {
      if (!(*file)->HasKey("tokenizer.chat_template")) {
        return Fail(kTemplateError,
                    absl::StrCat("FAILED_PRECONDITION: ", model_path,
                                 " has no tokenizer.chat_template; pass --chat-template FILE"));
      }
      auto text = (*file)->GetString("tokenizer.chat_template");
      if (!text.ok()) return Fail(kLoadError, text.status().ToString());
      source = *std::move(text);
    }
  }
  if (!template_path.empty()) {
    auto text = ReadWholeFile(template_path);
    if (!text.ok()) return Fail(kTemplateError, text.status().ToString());
    source = *std::move(text);
  }
  auto tmpl = chat::ChatTemplate::Parse(source);
  if (!tmpl.ok()) {
    return Fail(kTemplateError, absl::StrCat("chat template: ", tmpl.status().message()));
  }
  auto messages_text = ReadWholeFile(absl::GetFlag(FLAGS_render_chat));
  if (!messages_text.ok()) return Fail(kBadPrompt, messages_text.status().ToString());
  auto messages = chat::ParseMessagesJson(*messages_text);
  if (!messages.ok()) return Fail(kBadPrompt, messages.status().message());
  auto rendered = tmpl->Render(*messages, options);
  if (!rendered.ok()) return Fail(kTemplateError, rendered.status().message());
  std::fwrite(rendered->text.data(), 1, rendered->text.size(), stdout);
  std::fflush(stdout);
  return kOk;
}

int RunInfo(const std::string& path) {
  auto file = GgufFile::Open(path);
  if (!file.ok()) return Fail(kLoadError, file.status().ToString());
  auto config = ModelConfig::FromGguf(**file);
  if (!config.ok()) return Fail(kLoadError, config.status().ToString());
  if (absl::Status s = config->Validate(); !s.ok()) return Fail(kLoadError, s.ToString());
  const ModelConfig& c = *config;
  const int64_t context =
      absl::GetFlag(FLAGS_info_context) > 0 ? absl::GetFlag(FLAGS_info_context) : c.context_length;
  const ModelAccounting f32 = ComputeAccounting(c, context, kernels::KvElement::kF32);
  const ModelAccounting f16 = ComputeAccounting(c, context, kernels::KvElement::kF16);
  const ModelAccounting q8 = ComputeAccounting(c, context, kernels::KvElement::kQ8);
  std::map<std::string, int> types;
  for (const GgufTensorInfo& t : (*file)->tensors()) types[GgmlTypeName(t.type)]++;
  std::vector<std::string> type_list;
  for (const auto& [name, count] : types) type_list.push_back(absl::StrCat(name, " x", count));

  std::printf("file                 %s (%.3f GiB, GGUF v%u)\n", path.c_str(),
              (*file)->file_size() / 1073741824.0, (*file)->version());
  std::printf("name                 %s\n", c.name.empty() ? "(none)" : c.name.c_str());
  std::printf("architecture         %s\n", c.architecture.c_str());
  std::printf("tensor types         %s\n", absl::StrJoin(type_list, ", ").c_str());
  std::printf("vocab_size           %ld\n", static_cast<long>(c.vocab_size));
  std::printf("context_length       %ld\n", static_cast<long>(c.context_length));
  std::printf("embedding_length     %ld\n", static_cast<long>(c.embedding_length));
  std::printf("block_count          %ld\n", static_cast<long>(c.block_count));
  std::printf("head_count           %ld (kv %ld, head_dim %ld)\n", static_cast<long>(c.head_count),
              static_cast<long>(c.head_count_kv), static_cast<long>(c.head_dim));
  std::printf("feed_forward_length  %ld\n", static_cast<long>(c.feed_forward_length));
  if (c.decoder.uses_rope()) {
    std::printf("rope                 dim %ld, base %g\n",
                static_cast<long>(c.rope_dimension_count), c.rope_freq_base);
  } else {
    std::printf("rope                 none\n");
  }
  std::printf("norm_eps             %g\n", c.norm_eps);
  std::printf("decoder              %s\n", DecoderSummary(c.decoder).c_str());
  std::printf("tied_embeddings      %s\n", c.tied_embeddings ? "yes" : "no");
  std::printf("parameters           %s\n", Commas(f32.total_params).c_str());
  std::printf("  non-embedding      %s\n", Commas(f32.non_embedding_params).c_str());
  std::printf("  embedding          %s\n", Commas(f32.embedding_params).c_str());
  std::printf("  positions          %s\n", Commas(f32.position_params).c_str());
  std::printf("  output (LM head)   %s\n", Commas(f32.output_params).c_str());
  std::printf("  per block          %s\n", Commas(f32.params_per_block).c_str());
  std::printf("FLOPs per token      %s (at context %ld)\n", Commas(f32.flops_per_token).c_str(),
              static_cast<long>(context));
  std::printf("KV bytes per token   %s (f32, exact mode); %s (f16 or bf16, fast mode); %s (q8)\n",
              Commas(f32.kv_bytes_per_token).c_str(), Commas(f16.kv_bytes_per_token).c_str(),
              Commas(q8.kv_bytes_per_token).c_str());
  return kOk;
}

int RunTokenize(const std::string& path, const std::string& prompt) {
  auto file = GgufFile::Open(path);
  if (!file.ok()) return Fail(kLoadError, file.status().ToString());
  auto tokenizer = Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) return Fail(kLoadError, tokenizer.status().ToString());
  if (!IsValidUtf8(prompt)) return Fail(kBadPrompt, "the prompt is not valid UTF-8");
  auto ids = (*tokenizer)->Encode(prompt, /*add_special=*/true);
  if (!ids.ok()) return Fail(kBadPrompt, ids.status().ToString());
  std::printf("%s\n", absl::StrJoin(*ids, ",").c_str());
  return kOk;
}

// "ID=BIAS,ID=BIAS" (empty: none) into `out`; ranges are ValidateSamplingParams's.
bool ParseLogitBias(absl::string_view text, std::vector<LogitBias>* out) {
  if (text.empty()) return true;
  for (absl::string_view pair : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> parts = absl::StrSplit(pair, '=');
    LogitBias entry;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &entry.id) ||
        !absl::SimpleAtof(parts[1], &entry.bias)) {
      return false;
    }
    out->push_back(entry);
  }
  return true;
}

int RunGenerate(const std::string& path) {
  ModelOptions options;
  options.path = path;
  options.precision = absl::GetFlag(FLAGS_exact) ? kernels::Precision::kExact
                                                 : kernels::Precision::kFast;
  options.max_batch_tokens = absl::GetFlag(FLAGS_batch);
  if (options.max_batch_tokens <= 0) return Fail(kUsage, "--batch must be positive");
  const int n_predict = absl::GetFlag(FLAGS_n_predict);
  if (n_predict < 0) return Fail(kUsage, "-n must be >= 0");

  SamplingParams sp;
  sp.temperature = static_cast<float>(absl::GetFlag(FLAGS_temp));
  sp.top_k = absl::GetFlag(FLAGS_top_k);
  sp.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  sp.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  sp.repetition_penalty = static_cast<float>(absl::GetFlag(FLAGS_repeat_penalty));
  sp.frequency_penalty = static_cast<float>(absl::GetFlag(FLAGS_frequency_penalty));
  sp.presence_penalty = static_cast<float>(absl::GetFlag(FLAGS_presence_penalty));
  if (!ParseLogitBias(absl::GetFlag(FLAGS_logit_bias), &sp.logit_bias)) {
    return Fail(kUsage, "--logit_bias must be ID=BIAS pairs separated by commas");
  }
  const int64_t seed = absl::GetFlag(FLAGS_seed);
  sp.seed = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
  if (absl::Status s = ValidateSamplingParams(sp); !s.ok()) return Fail(kUsage, s.message());

  auto t_load = std::chrono::steady_clock::now();
  auto loaded = Model::Load(options);
  if (!loaded.ok()) return Fail(kLoadError, loaded.status().ToString());
  Model& model = **loaded;
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  const Tokenizer& tok = model.tokenizer();
  const ModelConfig& c = model.config();
  for (const LogitBias& entry : sp.logit_bias) {
    if (entry.id >= c.vocab_size) {
      return Fail(kUsage, absl::StrCat("--logit_bias id ", entry.id,
                                       " is outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }

  // The prompt.
  std::vector<TokenId> prompt;
  const std::string prompt_ids_flag = absl::GetFlag(FLAGS_prompt_ids);
  if (!prompt_ids_flag.empty()) {
    std::vector<int> ids;
    if (!tools::ParseIdList(prompt_ids_flag, &ids)) {
      return Fail(kBadPrompt, "--prompt-ids must be a comma-separated list of integers");
    }
    for (int id : ids) {
      if (id < 0 || id >= c.vocab_size) {
        return Fail(kBadPrompt, absl::StrCat("prompt id ", id, " is outside the vocabulary [0, ",
                                             c.vocab_size, ")"));
      }
      prompt.push_back(id);
    }
  } else {
    const std::string text = absl::GetFlag(FLAGS_prompt);
    if (text.empty()) return Fail(kBadPrompt, "empty prompt (use -p TEXT or --prompt-ids)");
    if (!IsValidUtf8(text)) return Fail(kBadPrompt, "the prompt is not valid UTF-8");
    auto ids = tok.Encode(text, /*add_special=*/true);
    if (!ids.ok()) return Fail(kBadPrompt, ids.status().ToString());
    prompt = std::move(*ids);
  }
  if (prompt.empty()) return Fail(kBadPrompt, "the prompt has no tokens");

  int64_t ctx = absl::GetFlag(FLAGS_ctx) > 0 ? absl::GetFlag(FLAGS_ctx) : c.context_length;
  if (ctx > c.context_length) {
    return Fail(kUsage, absl::StrCat("--ctx ", ctx, " exceeds the model's context length ",
                                     c.context_length));
  }
  const int64_t total = static_cast<int64_t>(prompt.size()) + n_predict;
  if (total > ctx) {
    return Fail(kBadPrompt, absl::StrCat("prompt (", prompt.size(), " tokens) + -n ", n_predict,
                                         " = ", total, " exceeds the context of ", ctx, " tokens"));
  }

  // A KV cache just big enough for this one sequence.
  KvCacheOptions kv_options = model.MakeKvCacheOptions(0, 16);
  kv_options.budget_bytes = kv_options.BudgetForTokens(total);
  auto cache_or = KvCache::Create(kv_options);
  if (!cache_or.ok()) return Fail(kInternal, cache_or.status().ToString());
  KvCache& cache = **cache_or;
  const KvCache::SeqId seq = 0;
  if (absl::Status s = cache.Reserve(seq, total); !s.ok()) return Fail(kInternal, s.ToString());

  const bool print_ids = absl::GetFlag(FLAGS_ids);
  if (absl::GetFlag(FLAGS_echo) && !print_ids) {
    std::string text = tok.Decode(prompt, /*strip_leading_space=*/!prompt.empty() &&
                                              prompt[0] == tok.bos_id());
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }

  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  std::vector<TokenId> history = prompt;
  history.reserve(total);
  Sampler sampler(sp, static_cast<int>(c.vocab_size));
  // The SentencePiece leading space is dropped only when generation starts right after BOS.
  const bool strip = !absl::GetFlag(FLAGS_echo) && prompt.size() == 1 && prompt[0] == tok.bos_id();
  IncrementalDetokenizer detok(tok, strip);

  // Prefill in chunks of max_batch_tokens.
  auto t0 = std::chrono::steady_clock::now();
  const int chunk = options.max_batch_tokens;
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t n = std::min(prompt.size() - begin, static_cast<size_t>(chunk));
    BatchEntry e;
    e.seq = seq;
    e.tokens = absl::MakeConstSpan(prompt.data() + begin, n);
    e.first_pos = static_cast<int32_t>(begin);
    e.want_logits = begin + n == prompt.size();
    if (absl::Status s = model.Forward({&e, 1}, cache, logits.data()); !s.ok()) {
      return Fail(kInternal, s.ToString());
    }
  }
  auto t1 = std::chrono::steady_clock::now();

  int generated = 0;
  bool first_id = true;
  while (generated < n_predict) {
    const TokenId next =
        sampler.Sample(logits, prompt, absl::MakeConstSpan(history).subspan(prompt.size()));
    ++generated;
    history.push_back(next);
    const bool end = tok.IsEndOfGeneration(next) && !absl::GetFlag(FLAGS_ignore_eos);
    if (print_ids) {
      std::printf(first_id ? "%d" : ",%d", next);
      first_id = false;
    } else if (!end) {
      const std::string piece = detok.Push(next);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    }
    std::fflush(stdout);
    if (end || generated == n_predict) break;
    BatchEntry e;
    e.seq = seq;
    e.tokens = absl::MakeConstSpan(&history.back(), 1);
    e.first_pos = static_cast<int32_t>(history.size() - 1);
    e.want_logits = true;
    if (absl::Status s = model.Forward({&e, 1}, cache, logits.data()); !s.ok()) {
      return Fail(kInternal, s.ToString());
    }
  }
  if (!print_ids) {
    const std::string rest = detok.Flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  std::printf("\n");
  std::fflush(stdout);
  auto t2 = std::chrono::steady_clock::now();

  if (absl::GetFlag(FLAGS_stats)) {
    const double pp = std::chrono::duration<double>(t1 - t0).count();
    const double tg = std::chrono::duration<double>(t2 - t1).count();
    std::fprintf(stderr,
                 "quill-run: %s, %s weights (%.2f GiB packed), %s mode, %d threads; load %.2f s\n"
                 "quill-run: prompt %zu tokens in %.3f s (%.1f t/s); generated %d tokens in "
                 "%.3f s (%.1f t/s)\n",
                 c.name.empty() ? c.architecture.c_str() : c.name.c_str(),
                 model.weight_type_name().c_str(), model.weight_bytes() / 1073741824.0,
                 absl::GetFlag(FLAGS_exact) ? "exact" : "fast",
                 omp_get_max_threads(), load_s, prompt.size(), pp, prompt.size() / pp, generated,
                 tg, generated > 1 ? (generated - 1) / tg : 0.0);
  }
  return kOk;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "generates text from a GGUF Llama-family model.\n"
      "\n"
      "  quill-run -m MODEL.gguf -p \"PROMPT\" [-n 64] [--temp 0] [--exact] [--ids]\n"
      "  quill-run -m MODEL.gguf --prompt-ids 1,2,3 -n 16 --ids\n"
      "  quill-run -m VOCAB_OR_MODEL.gguf -p \"TEXT\" --tokenize\n"
      "  quill-run -m MODEL.gguf --info [--info-context 4096]\n"
      "  quill-run --render-chat MESSAGES.json [-m MODEL.gguf] [--chat-template FILE]\n"
      "            [--no-generation-prompt] [--template-date YYYY-MM-DD]\n"
      "\n"
      "Short aliases: -m --model, -p --prompt, -n --n_predict, -t --threads, -s --seed,\n"
      "-c --ctx, -h --help. Dashes and underscores in long flag names are equivalent.\n"
      "--render-chat prints the chat prompt the model's tokenizer.chat_template (or\n"
      "--chat-template FILE) makes of an OpenAI-style messages array, exactly, and exits;\n"
      "it reads only the GGUF's metadata, so vocabulary-only files work.\n"
      "Exit codes: 0 ok, 1 internal error, 2 usage, 3 model load error, 4 bad prompt\n"
      "or messages, 5 chat template error (missing, bad syntax, or failed to render).");
  tools::ShowToolFlagsInHelp();
  std::vector<std::string> args =
      tools::NormalizeArgs(argc, argv,
                           {{"m", "model"}, {"p", "prompt"}, {"n", "n_predict"},
                            {"t", "threads"}, {"s", "seed"}, {"c", "ctx"}, {"h", "help"}});
  if (std::string bad = tools::FirstUnknownFlag(args); !bad.empty()) {
    return Fail(kUsage, absl::StrCat("unknown flag ", bad, " (see --help)"));
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  std::vector<char*> positional = absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());
  if (positional.size() > 1) {
    return Fail(kUsage, absl::StrCat("unexpected argument '", positional[1], "' (see --help)"));
  }

  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) return Fail(kUsage, "--threads must be >= 0");
  if (threads > 0) {
    omp_set_num_threads(threads);
  } else if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    omp_set_num_threads(omp_get_num_procs());
  }

  const std::string path = absl::GetFlag(FLAGS_model);
  if (!absl::GetFlag(FLAGS_render_chat).empty()) return RunRenderChat(path);
  if (path.empty()) return Fail(kUsage, "no model given (use -m MODEL.gguf; see --help)");
  if (absl::GetFlag(FLAGS_info)) return RunInfo(path);
  if (absl::GetFlag(FLAGS_tokenize)) return RunTokenize(path, absl::GetFlag(FLAGS_prompt));
  return RunGenerate(path);
}

}  // namespace
}  // namespace quill::engine

int main(int argc, char** argv) { return quill::engine::Main(argc, argv); }
