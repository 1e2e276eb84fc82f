#include "engine/tokenizer/vocab_test_util.h"

#include <cstdlib>
#include <sstream>

#include "absl/strings/str_split.h"
#include "engine/gguf/gguf_file.h"

namespace quill::engine::vocab_testing {

std::string SharedDir() {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  return dir != nullptr ? dir : "";
}

bool ReadFile(const std::string& path, std::string* contents) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *contents = s.str();
  return true;
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path) {
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  auto tokenizer = Tokenizer::FromGguf(**file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

std::vector<TokenId> EncodeOrDie(const Tokenizer& t, absl::string_view text, bool add_special) {
  auto ids = t.Encode(text, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<TokenId>{};
}

std::vector<TokenId> EncodeSpecialOrDie(const Tokenizer& t, absl::string_view text,
                                        bool add_special, std::vector<ByteRange> plain_ranges) {
  auto ids = t.EncodeWithSpecialTokens(text, add_special, plain_ranges);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<TokenId>{};
}

std::vector<TokenId> Vectors::IdsOf(absl::string_view text) const {
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i] == text) return ids[i];
  }
  ADD_FAILURE() << "no vector for \"" << text << "\"";
  return {};
}

bool ReadVectors(const std::string& gguf_path, Vectors* vectors) {
  std::string inp, out;
  if (!ReadFile(gguf_path + ".inp", &inp) || !ReadFile(gguf_path + ".out", &out)) return false;
  vectors->texts = absl::StrSplit(inp, "\n__ggml_vocab_test__\n");
  // The file ends with the separator, so the last piece is empty and no test.
  if (vectors->texts.empty() || !vectors->texts.back().empty()) return false;
  vectors->texts.pop_back();
  const std::vector<std::string> lines = absl::StrSplit(out, '\n');
  if (lines.size() < vectors->texts.size()) return false;
  vectors->ids.clear();
  for (size_t i = 0; i < vectors->texts.size(); ++i) {
    std::vector<TokenId> ids;
    std::istringstream in(lines[i]);
    for (TokenId id; in >> id;) ids.push_back(id);
    vectors->ids.push_back(std::move(ids));
  }
  return true;
}

}  // namespace quill::engine::vocab_testing
