// The tiny model's tokenizer gives exactly Hugging Face's ids for the oracle's text prompts
// (../shared/models/glm-dsa-tiny.oracle.h5: each group's `text` attribute and `input_ids`).
#include <hdf5.h>

#include "core/gguf.h"
#include "tok_test_util.h"
#include "tokenizer/streamer.h"
#include "tokenizer/utf8.h"

namespace {

using mlaconf::tok::Tokenizer;

struct OracleCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Reads a group's `text` attribute (variable- or fixed-length string) and `input_ids` dataset.
bool read_oracle_case(const std::string& file, const std::string& group, OracleCase* out, std::string* why) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    *why = file + ": cannot open";
    return false;
  }
  bool ok = false;
  hid_t g = H5Gopen2(f, group.c_str(), H5P_DEFAULT);
  if (g >= 0) {
    hid_t a = H5Aopen(g, "text", H5P_DEFAULT);
    if (a >= 0) {
      hid_t ty = H5Aget_type(a);
      if (H5Tis_variable_str(ty) > 0) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, H5T_CSET_UTF8);
        char* s = nullptr;
        if (H5Aread(a, mt, &s) >= 0 && s) {
          out->text = s;
          H5free_memory(s);
          ok = true;
        }
        H5Tclose(mt);
      } else {
        size_t n = H5Tget_size(ty);
        std::string buf(n, '\0');
        if (H5Aread(a, ty, buf.data()) >= 0) {
          buf.resize(buf.find('\0') == std::string::npos ? n : buf.find('\0'));
          out->text = buf;
          ok = true;
        }
      }
      H5Tclose(ty);
      H5Aclose(a);
    }
    hid_t d = ok ? H5Dopen2(g, "input_ids", H5P_DEFAULT) : -1;
    ok = false;
    if (d >= 0) {
      hid_t sp = H5Dget_space(d);
      hssize_t n = H5Sget_simple_extent_npoints(sp);
      out->ids.assign(static_cast<size_t>(n), 0);
      ok = n > 0 && H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->ids.data()) >= 0;
      H5Sclose(sp);
      H5Dclose(d);
    }
    H5Gclose(g);
  }
  H5Fclose(f);
  if (!ok) *why = file + ": group '" + group + "' lacks a readable `text` attribute or `input_ids`";
  return ok;
}

void check_oracle(const std::string& group) {
  if (!tokt::file_exists(tokt::tiny_oracle_path()) || !tokt::tiny_tokenizer())
    GTEST_SKIP() << "skipped: " << tokt::tiny_oracle_path() << " or the tiny GGUF not found (../shared absent)";
  OracleCase c;
  std::string why;
  ASSERT_TRUE(read_oracle_case(tokt::tiny_oracle_path(), group, &c, &why)) << why;
  ASSERT_FALSE(c.text.empty());
  const Tokenizer& t = *tokt::tiny_tokenizer();
  std::vector<int32_t> ids = t.encode(c.text);
  ASSERT_EQ(ids.size(), c.ids.size()) << "ours " << tokt::ids_string(ids) << "\nHF   " << tokt::ids_string(c.ids);
  for (size_t i = 0; i < ids.size(); ++i)
    ASSERT_EQ(ids[i], c.ids[i]) << "first difference at position " << i << " ('" << t.token_text(ids[i]) << "' vs '"
                                << t.token_text(c.ids[i]) << "')";
  EXPECT_EQ(t.decode(ids), c.text);
  // With bos: the same ids after [gMASK].
  std::vector<int32_t> with_bos = t.encode(c.text, {.add_bos = true});
  ASSERT_EQ(with_bos.size(), ids.size() + 1);
  EXPECT_EQ(with_bos[0], t.bos_id());
}

// Negative control: an encoder that is not rank-ordered BPE (longest vocabulary match per piece, the
// same vocabulary and split) must NOT reproduce HF's ids on the 200-token prompt, or the comparison
// above could not tell a wrong merge order from the right one. (A wrong split regex cannot be caught
// on these prose prompts: GPT-2's and glm4's splits agree on them; the HF cross-check on the awkward
// corpus catches that instead: hf_crosscheck_negative.)
void negative_control_wrong_pre() {
  if (!tokt::file_exists(tokt::tiny_oracle_path()) || !tokt::tiny_tokenizer())
    GTEST_SKIP() << "skipped: ../shared absent";
  OracleCase c;
  std::string why;
  ASSERT_TRUE(read_oracle_case(tokt::tiny_oracle_path(), "prompt200", &c, &why)) << why;
  const Tokenizer& t = *tokt::tiny_tokenizer();
  std::vector<int32_t> greedy;
  for (std::string_view piece : t.pretokenizer().split(c.text)) {
    for (size_t i = 0; i < piece.size();) {  // longest vocabulary match instead of rank-ordered merges
      for (size_t len = piece.size() - i; len >= 1; --len) {
        std::string spelled;
        for (char ch : piece.substr(i, len)) spelled += mlaconf::tok::byte_to_symbol(static_cast<uint8_t>(ch));
        int32_t id = t.find_token(spelled);
        if (id >= 0) {
          greedy.push_back(id);
          i += len;
          break;
        }
      }
    }
  }
  EXPECT_EQ(t.decode(greedy), c.text);
  EXPECT_NE(greedy, c.ids) << "longest-match segmentation equals BPE here: the oracle would not catch a non-BPE encoder";
}

// The oracle's greedy continuation (HF's generated ids, `tokens`), streamed token by token, gives
// the whole decode's text, every chunk well-formed UTF-8.
void check_greedy_stream() {
  if (!tokt::file_exists(tokt::tiny_oracle_path()) || !tokt::tiny_tokenizer())
    GTEST_SKIP() << "skipped: ../shared absent";
  hid_t f = H5Fopen(tokt::tiny_oracle_path().c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, "greedy200x24/tokens", H5P_DEFAULT);
  ASSERT_GE(d, 0) << "greedy200x24/tokens missing";
  hid_t sp = H5Dget_space(d);
  std::vector<int32_t> ids(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
  herr_t rc = H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids.data());
  H5Sclose(sp);
  H5Dclose(d);
  H5Fclose(f);
  ASSERT_GE(rc, 0);
  ASSERT_EQ(ids.size(), 24u);
  const Tokenizer& t = *tokt::tiny_tokenizer();
  mlaconf::tok::TextStreamer s(t);
  std::string acc;
  for (int32_t id : ids) {
    std::string part = s.push(id);
    EXPECT_TRUE(mlaconf::tok::is_valid_utf8(part));
    acc += part;
  }
  acc += s.flush();
  EXPECT_EQ(acc, t.decode(ids));
  EXPECT_FALSE(acc.empty());
}

const bool registered = [] {
  for (const char* g : {"prompt12", "prompt200", "greedy200x24"})
    tokt::register_case("TokenizerOracle", std::string("tokenize_oracle(model=glm_dsa_tiny,case=") + g + ")",
                        [g] { check_oracle(g); });
  tokt::register_case("TokenizerOracle", "stream_oracle_greedy(model=glm_dsa_tiny,case=greedy200x24)", check_greedy_stream);
  tokt::register_case("TokenizerOracle", "tokenize_oracle_negative(model=glm_dsa_tiny,case=prompt200,variant=longest_match)",
                      negative_control_wrong_pre);
  return true;
}();

}  // namespace
