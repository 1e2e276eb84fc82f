#include "engine/tokenizer/byte_unicode.h"

namespace quill::engine {
namespace {

bool MapsToItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::array<char32_t, 256> BuildByteToUnicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) table[b] = MapsToItself(b) ? static_cast<char32_t>(b) : next++;
  return table;
}

}  // namespace

const std::array<char32_t, 256>& ByteToUnicode() {
  static const std::array<char32_t, 256> table = BuildByteToUnicode();
  return table;
}

int UnicodeToByte(char32_t cp) {
  // The alphabet lies in U+0000..U+0143.
  static const std::array<int16_t, 0x144> inverse = [] {
    std::array<int16_t, 0x144> table;
    table.fill(-1);
    for (int b = 0; b < 256; ++b) table[ByteToUnicode()[b]] = static_cast<int16_t>(b);
    return table;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

}  // namespace quill::engine
