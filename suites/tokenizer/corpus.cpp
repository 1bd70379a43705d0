#include "corpus.h"

using namespace std::string_literals;

namespace tokt {

const std::vector<CorpusEntry>& awkward_corpus() {
  static const std::vector<CorpusEntry> c = {
      {"ascii_sentence", "The quick brown fox jumps over the lazy dog."},
      {"contractions", "I'm sure they'd've known it's John's; WE'LL SEE, you're right, I've, he'll, she'D, 'S, 'Ll"},
      {"whitespace_runs", "a  b   c    d\t\te \t \n  f     "},
      {"newlines", "line1\nline2\r\n\r\nline3\n\n\n  indented\n\ttab\r"},
      {"leading_trailing_space", "   leading and trailing   "},
      {"single_space", " "},
      {"empty", ""},
      {"long_digits", "1234567890123456789012345678901234567890 and 3.14159265358979 and 1,000,000 and 0007"},
      {"emoji", "I \u2764\uFE0F \U0001F355 and \U0001F680\U0001F680\U0001F680!"},
      {"emoji_zwj", "family \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466, flag \U0001F3F3\uFE0F\u200D\U0001F308, "
                    "wave \U0001F44B\U0001F3FD, UN \U0001F1FA\U0001F1F3"},
      {"cjk", "\u4F60\u597D\uFF0C\u4E16\u754C\uFF01\u65E5\u672C\u8A9E\u306E\u30C6\u30AD\u30B9\u30C8\u3002"
              "\uD55C\uAD6D\uC5B4 \uD14D\uC2A4\uD2B8."},
      {"combining_marks", "e\u0301 vs \u00E9, n\u0303, a\u0308\u0304, Z\u0351\u0352\u0353algo, \u0915\u094D\u0937"},
      {"mixed_scripts", "\u0395\u03BB\u03BB\u03B7\u03BD\u03B9\u03BA\u03AC \u0440\u0443\u0441\u0441\u043A\u0438\u0439 "
                        "\u05E2\u05D1\u05E8\u05D9\u05EA \u0627\u0644\u0639\u0631\u0628\u064A\u0629 \u0939\u093F\u0928\u094D\u0926\u0940 "
                        "\u0E44\u0E17\u0E22"},
      {"punctuation_runs", "Wait...!!! ??? ---- ==> (a[b]{c}) <tag attr=\"v\"/> $$$ @#%^&* \\o/"},
      {"code", "def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n    print(f(3))\n"},
      {"smart_quotes", "It\u2019s \u201Csmart\u201D \u2014 and \u2018single\u2019 \u2026"},
      {"numbers_mixed", "v1.2.3-rc4 0x1F 1e-10 \u0661\u0662\u0663\u0664 \u00B9\u00B2\u00B3 \u00BD \u2167"},
      {"unicode_spaces", "a\u00A0b\u2003c\u3000d\u2028e\u0085f\u200Bg\u180Eh\u2029i\u1680j"},
      {"control_chars", "nul\0"s "byte, bell\x07, esc\x1B[0m, del\x7F, fs\x1C gs\x1D rs\x1E us\x1F."},
      {"bidi_and_bom", "abc\u202Edef\u200F \uFEFFbom \u200Czwnj"},
      {"astral_and_edges", "\U0010FFFF \U0001F600 \uFFFD \uFFFF \U00020000 \u0800 \u07FF"},
      {"special_tokens", "[gMASK]<sop><|user|>\nHello<|assistant|>\nHi there<|endoftext|>"},
      {"special_adjacent", "x<|user|><|user|>y<|endoftext|>[MASK][sMASK]"},
      {"special_partial", "<|use r|> <|user <|endoftext| [MASK <|system|"},
      {"long_runs", std::string(600, ' ') + "x" + std::string(900, 'z') + std::string(300, '\n') + "!" + std::string(400, '9')},
      {"case_folding", "it'\u017F x'\u017F'\u013Fl '\u212A'S'\u017F DON'T"},
      {"prose", "On the morning the river froze, the whole town came down to the water to see it. "
                "Children slid along the edges in their boots."},
  };
  return c;
}

}  // namespace tokt
