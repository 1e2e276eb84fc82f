#include "engine/chat/reasoning.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace quill::engine::chat {
namespace {

constexpr absl::string_view kOpen = "<think>";
constexpr absl::string_view kClose = "</think>";
constexpr absl::string_view kProbeThought = "quill_probe_thought";
constexpr absl::string_view kProbeAnswer = "quill_probe_answer";
// A thought opens the answer: after at most this much whitespace (a stream holds what
// may still become a thought, so this bounds what it holds).
constexpr size_t kMaxLeadingSpace = 64;

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t PartialTagAtEnd(absl::string_view text, absl::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (absl::EndsWith(text, tag.substr(0, n))) return n;
  }
  return 0;
}

}  // namespace

bool ProbeThinks(const ChatTemplate& tmpl, const RenderLimits& limits) {
  using json = nlohmann::ordered_json;
  ChatRenderOptions options;
  options.limits = limits;
  options.date = absl::CivilDay(2026, 1, 1);
  options.add_generation_prompt = true;
  const json user = {{"role", "user"}, {"content", "Think first."}};
  // A template that writes the tags itself: an instruction to think in them, an empty
  // thought (thinking off), or a thought opened for the model.
  absl::StatusOr<RenderedChat> prompt = tmpl.Render(json::array({user}), options);
  if (!prompt.ok()) return false;
  if (absl::StrContains(prompt->text, kOpen) || absl::StrContains(prompt->text, kClose)) {
    return true;
  }
  // One that drops an earlier answer's thought from the conversation.
  const json assistant = {
      {"role", "assistant"},
      {"content", absl::StrCat(kOpen, kProbeThought, kClose, "\n\n", kProbeAnswer)}};
  const json again = {{"role", "user"}, {"content", "Again."}};
  absl::StatusOr<RenderedChat> rendered =
      tmpl.Render(json::array({user, assistant, again}), options);
  return rendered.ok() && absl::StrContains(rendered->text, kProbeAnswer) &&
         !absl::StrContains(rendered->text, kProbeThought);
}

bool PromptOpensThought(absl::string_view prompt_tail) {
  return absl::EndsWith(absl::StripTrailingAsciiWhitespace(prompt_tail), kOpen);
}

ReasoningSplitter::ReasoningSplitter(bool thought_open)
    : state_(thought_open ? State::kThought : State::kStart) {}

ReasoningSplitter::Parts ReasoningSplitter::Add(absl::string_view piece) {
  Parts out;
  if (state_ == State::kContent) {  // settled: the usual case once the thought is over
    out.content.assign(piece.data(), piece.size());
    return out;
  }
  held_.append(piece.data(), piece.size());
  // Each state either decides and moves on (looping for the rest of the text) or holds.
  while (true) {
    switch (state_) {
      case State::kStart: {
        const absl::string_view rest = absl::StripLeadingAsciiWhitespace(held_);
        if (held_.size() - rest.size() > kMaxLeadingSpace) {
          state_ = State::kContent;
          continue;
        }
        if (absl::StartsWith(rest, kOpen)) {
          held_.erase(0, held_.size() - rest.size() + kOpen.size());
          state_ = State::kThought;
          continue;
        }
        if (absl::StartsWith(kOpen, rest)) return out;  // "", "<", "<thi", ...
        state_ = State::kContent;
        continue;
      }
      case State::kThought: {
        const size_t close = absl::string_view(held_).find(kClose);
        if (close != absl::string_view::npos) {
          out.reasoning.append(held_, 0, close);
          held_.erase(0, close + kClose.size());
          state_ = State::kGap;
          continue;
        }
        const size_t keep = PartialTagAtEnd(held_, kClose);
        out.reasoning.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      case State::kGap: {
        const absl::string_view rest = absl::StripLeadingAsciiWhitespace(held_);
        if (rest.empty()) {
          held_.clear();
          return out;
        }
        held_.erase(0, held_.size() - rest.size());
        state_ = State::kContent;
        continue;
      }
      case State::kContent:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

ReasoningSplitter::Parts ReasoningSplitter::Finish() {
  Parts out;
  switch (state_) {
    case State::kStart:
    case State::kContent:
      out.content = std::move(held_);
      break;
    case State::kThought:
      out.reasoning = std::move(held_);
      break;
    case State::kGap:
      break;
  }
  held_.clear();
  state_ = State::kContent;
  return out;
}

}  // namespace quill::engine::chat
