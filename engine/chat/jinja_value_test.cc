// Values: Python's printing of floats and strings, provenance arithmetic, JSON in and out
// (json.dumps's exact output). Expected strings are what CPython 3.11 prints.

#include "engine/chat/jinja_value.h"

#include <cmath>
#include <limits>

#include "engine/chat/jinja_json.h"
#include "engine/chat/py_string.h"
#include "gtest/gtest.h"

namespace quill::engine::chat::jinja {
namespace {

TEST(FormatFloatTest, MatchesPythonRepr) {
  const struct {
    double value;
    const char* repr;
  } cases[] = {
      {1.0, "1.0"},
      {0.1, "0.1"},
      {0.1 + 0.2, "0.30000000000000004"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {123456789012345678.0, "1.2345678901234568e+17"},
      {0.0001, "0.0001"},
      {0.00001, "1e-05"},
      {-0.0, "-0.0"},
      {2.5e-300, "2.5e-300"},
      {1.5e300, "1.5e+300"},
      {-3.25, "-3.25"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {-std::numeric_limits<double>::infinity(), "-inf"},
      {std::nan(""), "nan"},
  };
  for (const auto& c : cases) EXPECT_EQ(FormatFloat(c.value), c.repr);
}

TEST(PyStringTest, ReprQuotesAndEscapesLikePython) {
  EXPECT_EQ(py::Repr("abc"), "'abc'");
  EXPECT_EQ(py::Repr("it's"), "\"it's\"");
  EXPECT_EQ(py::Repr("'\""), "'\\'\"'");
  EXPECT_EQ(py::Repr("a\nb\t\\\x01\x7f"), "'a\\nb\\t\\\\\\x01\\x7f'");
  EXPECT_EQ(py::Repr("\xc3\xa9\xe6\x97\xa5\xf0\x9f\x99\x82"),
            "'\xc3\xa9\xe6\x97\xa5\xf0\x9f\x99\x82'");
  EXPECT_EQ(py::Repr("\xc2\xa0\xe2\x80\x8b"), "'\\xa0\\u200b'");  // not printable in Python
}

TEST(PyStringTest, CodePointsAndInvalidUtf8) {
  EXPECT_EQ(py::CodePointCount("h\xc3\xa9llo \xf0\x9f\x99\x82"), 7u);
  // Invalid bytes count as one code point each and never read past the end.
  EXPECT_EQ(py::CodePointCount("a\xff\xc3"), 3u);
  size_t len = 0;
  EXPECT_EQ(py::DecodeAt("\xe6\x97", 0, &len), 0xE6u);
  EXPECT_EQ(len, 1u);
  // Overlongs, surrogates and values past U+10FFFF are single bytes too.
  for (const char* bad : {"\xc0\x80", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    EXPECT_EQ(py::DecodeAt(bad, 0, &len), static_cast<uint8_t>(bad[0])) << bad;
    EXPECT_EQ(len, 1u) << bad;
  }
  EXPECT_EQ(py::DecodeAt("x\xf4\x8f\xbf\xbf", 1, &len), 0x10FFFFu);
  EXPECT_EQ(len, 4u);
}

TEST(PyStringTest, SplitLinesMatchesPython) {
  const std::string s =
      "a\nb\r\nc\rd\x0b"
      "e\xe2\x80\xa8"
      "f";
  const auto lines = py::SplitLines(s);
  std::vector<std::string> got;
  for (const auto& [b, e] : lines) got.push_back(s.substr(b, e - b));
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
}

TEST(ProvenanceTest, ConcatAndSliceKeepRangesExact) {
  const StrPtr trusted = MakeStr("<|im_start|>user\n");
  const StrPtr content = MakeUntrustedStr("hello");
  const StrPtr joined = Concat(*Concat(*trusted, *content), *MakeStr("<|im_end|>"));
  EXPECT_EQ(joined->text, "<|im_start|>user\nhello<|im_end|>");
  ASSERT_EQ(joined->untrusted.ranges().size(), 1u);
  EXPECT_EQ(joined->untrusted.ranges()[0], (ByteRange{17, 22}));

  const StrPtr middle = Substr(*joined, 15, 20);  // "r\nhel"
  ASSERT_EQ(middle->untrusted.ranges().size(), 1u);
  EXPECT_EQ(middle->untrusted.ranges()[0], (ByteRange{2, 5}));
  EXPECT_TRUE(Substr(*joined, 0, 17)->untrusted.empty());

  // Adjacent untrusted pieces merge into one range.
  const StrPtr two = Concat(*content, *content);
  ASSERT_EQ(two->untrusted.ranges().size(), 1u);
  EXPECT_EQ(two->untrusted.ranges()[0], (ByteRange{0, 10}));

  EXPECT_TRUE(Derived("x", false)->untrusted.empty());
  EXPECT_EQ(Derived("xyz", true)->untrusted.ranges()[0], (ByteRange{0, 3}));
}

TEST(ValueTest, EqualityAndOrderingFollowPython) {
  Heap heap;
  const Value one = Value::Int(1), one_f = Value::Float(1.0), yes = Value::Bool(true);
  EXPECT_TRUE(*Equals(one, one_f));
  EXPECT_TRUE(*Equals(one, yes));
  EXPECT_FALSE(*Equals(Value::Str("1"), one));
  EXPECT_TRUE(*Equals(Value(), Value()));  // undefined == undefined
  EXPECT_FALSE(*Equals(Value(), Value::None()));
  EXPECT_FALSE(*Equals(Value::Int(9007199254740993), Value::Float(9007199254740992.0)));

  const Value list = Value::List(heap.New<ListObject>(ListKind::kList, std::vector<Value>{one}));
  const Value tuple = Value::List(heap.New<ListObject>(ListKind::kTuple, std::vector<Value>{one}));
  EXPECT_FALSE(*Equals(list, tuple));
  EXPECT_LT(*Compare(Value::Str("a"), Value::Str("b")), 0);
  EXPECT_GT(*Compare(Value::Float(2.5), one), 0);
  absl::StatusOr<int> bad = Compare(one, Value::Str("a"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "TypeError: '<' not supported between instances of 'int' and 'str'");
}

TEST(JsonTest, FromJsonKeepsOrderAndMarksStringsUntrusted) {
  Heap heap;
  const nlohmann::ordered_json json =
      nlohmann::ordered_json::parse(R"({"b": [1, 2.5, true, null], "a": "x"})");
  absl::StatusOr<Value> v = FromJson(json, heap, /*untrusted=*/true);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->is_dict());
  const auto& entries = v->dict()->entries;
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].first.text(), "b");
  EXPECT_FALSE(entries[0].first.str().untrusted.empty());  // keys come from the request too
  EXPECT_EQ(entries[1].second.text(), "x");
  EXPECT_EQ(entries[1].second.str().untrusted.ranges()[0], (ByteRange{0, 1}));
  absl::StatusOr<StrPtr> text = ToStr(*v);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ((*text)->text, "{'b': [1, 2.5, True, None], 'a': 'x'}");
  EXPECT_EQ((*text)->untrusted.ranges()[0], (ByteRange{0, (*text)->text.size()}));
}

TEST(JsonTest, FromJsonBoundsNesting) {
  Heap heap;
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "[";
  for (int i = 0; i < 300; ++i) deep += "]";
  absl::StatusOr<Value> v = FromJson(nlohmann::json::parse(deep), heap, true);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JsonTest, DumpMatchesPythonJsonDumps) {
  Heap heap;
  const nlohmann::ordered_json json = nlohmann::ordered_json::parse(
      R"({"s": "\u00e9\u65e5 \ud83d\ude42 \"q\" \\ \n\t\u0001\u007f", "n": [1, -2.5, 1e16, 0.1],
          "e": {}, "l": [], "t": true, "z": null})");
  absl::StatusOr<Value> v = FromJson(json, heap, false);
  ASSERT_TRUE(v.ok());

  absl::StatusOr<StrPtr> out = DumpJson(*v, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)->text,
            "{\"s\": \"\xc3\xa9\xe6\x97\xa5 \xf0\x9f\x99\x82 \\\"q\\\" \\\\ \\n\\t\\u0001\x7f\", "
            "\"n\": [1, -2.5, 1e+16, 0.1], \"e\": {}, \"l\": [], \"t\": true, \"z\": null}");

  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  out = DumpJson(v->dict()->entries[0].second, ascii);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)->text, "\"\\u00e9\\u65e5 \\ud83d\\ude42 \\\"q\\\" \\\\ \\n\\t\\u0001\\u007f\"");

  JsonDumpOptions indented;
  indented.indent = "  ";
  indented.sort_keys = true;
  out = DumpJson(
      *FromJson(nlohmann::ordered_json::parse(R"({"b": [1, {}], "a": {"c": []}})"), heap, false),
      indented);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)->text, "{\n  \"a\": {\n    \"c\": []\n  },\n  \"b\": [\n    1,\n    {}\n  ]\n}");

  const Value special = Value::List(heap.New<ListObject>(
      ListKind::kTuple, std::vector<Value>{Value::Float(std::nan("")), Value::Float(-INFINITY)}));
  out = DumpJson(special, {});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)->text, "[NaN, -Infinity]");

  absl::StatusOr<StrPtr> bad = DumpJson(Value(), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "TypeError: Object of type Undefined is not JSON serializable");
}

}  // namespace
}  // namespace quill::engine::chat::jinja
