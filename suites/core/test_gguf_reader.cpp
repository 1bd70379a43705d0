// The GGUF reader against files built byte by byte: v2 and v3, every metadata value type and arrays of
// each, alignments other than 32, split models opened from any shard, missing keys named in the error,
// deepseek32 accepted. Case names are built from the parameters (testing::RegisterTest).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <set>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/model_config.h"
#include "core/weight_layout.h"
#include "suites/common/case_registry.h"
#include "suites/core/gguf_bytes.h"
#include "suites/core/synth_files.h"
#include "synth/synth.h"

namespace mlaconf {
namespace {

using testing_gguf::Bytes;
using testing_gguf::write_bytes;

// Every value type as a scalar and as an array, then one F32 tensor; `version` 2 or 3 (same layout).
std::vector<uint8_t> all_types_file(uint32_t version) {
  Bytes b;
  const int n_kv = 12 + 12 + 1;
  b.header(version, 1, n_kv);
  b.str("t.u8").u32(0).u8(200);
  b.str("t.i8").u32(1).put<int8_t>(-5);
  b.str("t.u16").u32(2).put<uint16_t>(60000);
  b.str("t.i16").u32(3).put<int16_t>(-30000);
  b.str("t.u32").u32(4).u32(4000000000u);
  b.str("t.i32").u32(5).put<int32_t>(-2000000000);
  b.str("t.f32").u32(6).put<float>(1.5f);
  b.str("t.bool").u32(7).u8(1);
  b.str("t.str").u32(8).str("h\xc3\xa9llo");
  b.str("t.u64").u32(10).u64(uint64_t{1} << 62);
  b.str("t.i64").u32(11).i64(-(int64_t{1} << 62));
  b.str("t.f64").u32(12).put<double>(1e-300);
  b.str("a.u8").u32(9).u32(0).u64(3).u8(1).u8(2).u8(255);
  b.str("a.i8").u32(9).u32(1).u64(2).put<int8_t>(-1).put<int8_t>(127);
  b.str("a.u16").u32(9).u32(2).u64(2).put<uint16_t>(0).put<uint16_t>(65535);
  b.str("a.i16").u32(9).u32(3).u64(1).put<int16_t>(-32768);
  b.str("a.u32").u32(9).u32(4).u64(2).u32(7).u32(4294967295u);
  b.str("a.i32").u32(9).u32(5).u64(3).put<int32_t>(-1).put<int32_t>(0).put<int32_t>(1);
  b.str("a.f32").u32(9).u32(6).u64(2).put<float>(-0.25f).put<float>(3e38f);
  b.str("a.bool").u32(9).u32(7).u64(2).u8(1).u8(0);
  b.str("a.str").u32(9).u32(8).u64(3).str("a").str("").str("\xc3\xbc");
  b.str("a.u64").u32(9).u32(10).u64(1).u64(9000000000000000000ull);
  b.str("a.i64").u32(9).u32(11).u64(1).i64(std::numeric_limits<int64_t>::min());
  b.str("a.f64").u32(9).u32(12).u64(0);
  b.kv_u32("general.alignment", 32);
  b.tinfo("w", {8}, 0, 0);
  b.pad_to(32);
  for (int k = 0; k < 8; ++k) b.put<float>(0.5f * k - 1.0f);
  return b.b;
}

void check_all_types(uint32_t version) {
  const std::string dir = testing_gguf::scratch_dir("types");
  const std::string p = dir + "/types-v" + std::to_string(version) + ".gguf";
  write_bytes(p, all_types_file(version));
  GgufFile f = GgufFile::open(p);
  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.metadata().size(), 25u);
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i8"), -5);
  EXPECT_EQ(f.get_int("t.u16"), 60000);
  EXPECT_EQ(f.get_int("t.i16"), -30000);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.get_float("t.f32"), 1.5);
  EXPECT_TRUE(f.get_bool("t.bool"));
  EXPECT_EQ(f.get_string("t.str"), "h\xc3\xa9llo");
  EXPECT_EQ(f.get_int("t.u64"), int64_t{1} << 62);
  EXPECT_EQ(f.get_int("t.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(f.get_float("t.f64"), 1e-300);
  EXPECT_EQ(f.require("t.u16").type, GgufType::UINT16);
  EXPECT_EQ(f.require("t.f64").type, GgufType::FLOAT64);
  EXPECT_EQ(f.require("a.u8").ints, (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(f.require("a.u8").elem_type, GgufType::UINT8);
  EXPECT_EQ(f.require("a.i8").ints, (std::vector<int64_t>{-1, 127}));
  EXPECT_EQ(f.require("a.u16").ints, (std::vector<int64_t>{0, 65535}));
  EXPECT_EQ(f.require("a.i16").ints, (std::vector<int64_t>{-32768}));
  EXPECT_EQ(f.require("a.u32").ints, (std::vector<int64_t>{7, 4294967295ll}));
  EXPECT_EQ(f.require("a.i32").ints, (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(f.require("a.f32").floats, (std::vector<double>{-0.25, static_cast<double>(3e38f)}));
  EXPECT_EQ(f.require("a.bool").ints, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(f.require("a.bool").elem_type, GgufType::BOOL);
  EXPECT_EQ(f.require("a.str").strings, (std::vector<std::string>{"a", "", "\xc3\xbc"}));
  EXPECT_EQ(f.require("a.u64").ints, (std::vector<int64_t>{9000000000000000000ll}));
  EXPECT_EQ(f.require("a.i64").ints, (std::vector<int64_t>{std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(f.require("a.f64").array_size(), 0u);
  EXPECT_EQ(f.require("a.f64").elem_type, GgufType::FLOAT64);
  // Typed getters refuse the wrong type, naming the key.
  try {
    f.get_string("t.u32");
    ADD_FAILURE() << "get_string on a u32 did not throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("t.u32"), std::string::npos) << e.what();
  }
  const TensorInfo& t = f.tensor("w");
  ASSERT_EQ(t.nbytes, 32u);
  float v[8];
  std::memcpy(v, t.data, 32);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(v[k], 0.5f * k - 1.0f);
  std::filesystem::remove_all(dir);
}

// Two tensors of odd byte sizes written with `align`; offsets and data must land where GGUF says.
// The metadata's length is counted here from the GGUF layout (header 24 bytes; a key/value: u64 length,
// key, u32 type, value; a tensor info: u64 length, name, u32 n_dims, i64 per dim, u32 type, u64 offset),
// and the architecture string is lengthened until the metadata ends 1 to 31 bytes past a multiple of 64:
// padding to 1, 32 and 64 then all land elsewhere, so a reader that ignored general.alignment would fail.
void check_alignment(uint64_t align) {
  const std::string dir = testing_gguf::scratch_dir("align");
  const std::string p = dir + "/a.gguf";
  std::string arch = "test";
  auto meta_end = [&] {
    const uint64_t kv_arch = 8 + 20 + 4 + 8 + arch.size(), kv_align = align == 32 ? 0 : 8 + 17 + 4 + 4;
    return 24 + kv_arch + kv_align + (8 + 1 + 4 + 8 + 4 + 8) + (8 + 1 + 4 + 16 + 4 + 8);
  };
  while (meta_end() % 64 == 0 || meta_end() % 64 >= 32) arch += 'x';  // padding to 32 and to 64 differ
  GgufWriter w(align);
  w.set_string("general.architecture", arch);
  std::vector<uint8_t> d1(3 * 4), d2(34 * 3);  // F32 {3}; Q8_0 {32, 3}
  for (size_t k = 0; k < d1.size(); ++k) d1[k] = static_cast<uint8_t>(k + 1);
  for (size_t k = 0; k < d2.size(); ++k) d2[k] = static_cast<uint8_t>(200 - k);
  w.add_tensor("a", GgmlType::F32, {3}, d1);
  w.add_tensor("b", GgmlType::Q8_0, {32, 3}, d2);
  w.write(p);
  GgufFile f = GgufFile::open(p);
  EXPECT_EQ(f.shards()[0].alignment, align);
  EXPECT_EQ(f.shards()[0].data_offset, (meta_end() + align - 1) / align * align) << "metadata ends at " << meta_end();
  const TensorInfo& a = f.tensor("a");
  const TensorInfo& b = f.tensor("b");
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(b.offset, (12 + align - 1) / align * align);
  EXPECT_EQ(std::vector<uint8_t>(a.data, a.data + a.nbytes), d1);
  EXPECT_EQ(std::vector<uint8_t>(b.data, b.data + b.nbytes), d2);
  if (align != 32) {
    EXPECT_EQ(f.get_int("general.alignment"), static_cast<int64_t>(align));
  }
  std::filesystem::remove_all(dir);
}

// The same question answered without GgufWriter, whose padding rule the reader could share: a file built
// byte by byte with general.alignment = `align`, metadata that ends off every multiple of `align`, three
// tensors of odd byte sizes (F32 {3}, Q8_0 {32, 3}, F16 {5}) at offsets this test computes, the last one
// ending the file. `padding` says how the data section starts:
//   Correct  at the next multiple of `align` after the metadata (GGUF's rule);
//   Missing  right after the metadata (a writer that forgot the padding);
//   To32     at the next multiple of 32 (a writer that ignored general.alignment).
enum class Padding { Correct, Missing, To32 };
struct AlignedFile {
  std::vector<uint8_t> bytes;
  uint64_t meta_end = 0, data_offset = 0;
  std::vector<uint64_t> offsets;
  std::vector<std::vector<uint8_t>> data;
};

AlignedFile aligned_file(uint64_t align, Padding padding) {
  auto pad = [](uint64_t x, uint64_t a) { return (x + a - 1) / a * a; };
  AlignedFile r;
  r.data = {std::vector<uint8_t>(12), std::vector<uint8_t>(34 * 3), std::vector<uint8_t>(10)};
  for (size_t t = 0; t < r.data.size(); ++t)
    for (size_t k = 0; k < r.data[t].size(); ++k) r.data[t][k] = static_cast<uint8_t>(7 + 31 * t + 13 * k);
  uint64_t off = 0;
  for (const auto& d : r.data) {
    r.offsets.push_back(off);
    off = pad(off + d.size(), align);
  }
  // The architecture string's length moves the end of the metadata 1 to 31 bytes past a multiple of 64.
  for (std::string arch = "test";; arch += 'x') {
    Bytes b;
    b.header(3, 3, 2).kv_u32("general.alignment", static_cast<uint32_t>(align)).kv_str("general.architecture", arch);
    b.tinfo("a", {3}, 0, r.offsets[0]).tinfo("b", {32, 3}, 8, r.offsets[1]).tinfo("c", {5}, 1, r.offsets[2]);
    if (b.size() % 64 == 0 || b.size() % 64 >= 32) continue;  // padding to 1, 32 and 64 all differ
    r.meta_end = b.size();
    r.data_offset = pad(r.meta_end, padding == Padding::Correct ? align : padding == Padding::To32 ? 32 : 1);
    b.zeros(r.data_offset - r.meta_end);
    for (size_t t = 0; t < r.data.size(); ++t) {
      b.zeros(r.data_offset + r.offsets[t] - b.size());
      b.raw(r.data[t]);
    }
    r.bytes = b.b;
    return r;
  }
}

void check_alignment_bytes(uint64_t align) {
  const std::string dir = testing_gguf::scratch_dir("align-bytes");
  const std::string p = dir + "/a.gguf";
  const AlignedFile want = aligned_file(align, Padding::Correct);
  write_bytes(p, want.bytes);
  GgufFile f = GgufFile::open(p);
  EXPECT_EQ(f.shards()[0].alignment, align);
  EXPECT_EQ(f.shards()[0].data_offset, want.data_offset) << "metadata ends at " << want.meta_end;
  const char* names[] = {"a", "b", "c"};
  for (size_t t = 0; t < 3; ++t) {
    const TensorInfo& ti = f.tensor(names[t]);
    EXPECT_EQ(ti.offset, want.offsets[t]) << names[t];
    ASSERT_EQ(ti.nbytes, want.data[t].size()) << names[t];
    EXPECT_EQ(std::vector<uint8_t>(ti.data, ti.data + ti.nbytes), want.data[t]) << names[t] << " at align " << align;
  }
  std::filesystem::remove_all(dir);
}

// Negative control: a data section that does not start where general.alignment puts it (padding missing,
// or padded to 32 under an alignment of 64) would shift every tensor's bytes; the reader must refuse the
// file (the last tensor runs past the end), and `mlaconf inspect` must say so in one line with exit 2.
void check_bad_padding(uint64_t align, Padding padding) {
  const std::string dir = testing_gguf::scratch_dir("align-bad");
  const std::string p = dir + "/bad.gguf";
  const AlignedFile bad = aligned_file(align, padding);
  ASSERT_LT(bad.data_offset, aligned_file(align, Padding::Correct).data_offset) << "the control must move the data";
  write_bytes(p, bad.bytes);
  try {
    GgufFile::open(p);
    ADD_FAILURE() << "a data section at byte " << bad.data_offset << " instead of a multiple of " << align << " was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("runs past the end"), std::string::npos) << e.what();
  }
  if (std::filesystem::exists(MLACONF_CLI)) {
    const testing_synth::CmdResult r = testing_synth::run_cmd(std::string(MLACONF_CLI) + " inspect " + p);
    EXPECT_EQ(r.status, 2) << r.out << r.err;
    EXPECT_EQ(r.err.rfind("mlaconf: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  }
  std::filesystem::remove_all(dir);
}

// A split synthesized model opened from shard `open_no` (1-based) equals the unsplit one.
void check_split(int shards, int open_no) {
  const std::string dir = testing_gguf::scratch_dir("split");
  synth::Options o;
  o.seed = 11;
  o.split = shards;
  const auto paths = synth::write_model(o, dir + "/m.gguf");
  ASSERT_EQ(static_cast<int>(paths.size()), shards);
  GgufFile f = GgufFile::open(paths[open_no - 1]);
  GgufFile whole = GgufFile::open(testing_synth::tiny_seed11());
  EXPECT_EQ(static_cast<int>(f.shards().size()), shards);
  EXPECT_EQ(f.path(), paths[0]);
  EXPECT_EQ(f.get_int("split.count"), shards);
  EXPECT_EQ(f.get_int("split.tensors.count"), static_cast<int64_t>(whole.tensors().size()));
  ASSERT_EQ(f.tensors().size(), whole.tensors().size());
  std::set<int> used;
  for (const TensorInfo& t : whole.tensors()) {
    const TensorInfo* s = f.find_tensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(s->type, t.type);
    EXPECT_EQ(s->ne, t.ne);
    ASSERT_EQ(s->nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(s->data, t.data, t.nbytes), 0) << t.name << " differs between split and whole";
    used.insert(s->shard);
  }
  EXPECT_EQ(static_cast<int>(used.size()), shards) << "every shard should hold tensors";
  ModelConfig c = ModelConfig::from_gguf(f);
  EXPECT_EQ(c.to_json(), ModelConfig::from_gguf(whole).to_json());
  EXPECT_NO_THROW(validate_weights(f, c));
  std::filesystem::remove_all(dir);
}

// The keys ModelConfig::from_gguf requires; dropping any one must name it.
const char* kRequiredKeys[] = {
    "general.architecture", "glm-dsa.block_count", "glm-dsa.context_length", "glm-dsa.embedding_length",
    "glm-dsa.feed_forward_length", "glm-dsa.attention.head_count", "glm-dsa.attention.head_count_kv",
    "glm-dsa.attention.q_lora_rank", "glm-dsa.attention.kv_lora_rank", "glm-dsa.attention.key_length",
    "glm-dsa.attention.value_length", "glm-dsa.attention.key_length_mla", "glm-dsa.attention.value_length_mla",
    "glm-dsa.attention.layer_norm_rms_epsilon", "glm-dsa.rope.dimension_count", "glm-dsa.rope.freq_base",
    "glm-dsa.attention.indexer.head_count", "glm-dsa.attention.indexer.key_length",
    "glm-dsa.attention.indexer.top_k", "glm-dsa.leading_dense_block_count", "glm-dsa.expert_count",
    "glm-dsa.expert_used_count", "glm-dsa.expert_shared_count", "glm-dsa.expert_feed_forward_length",
    "glm-dsa.expert_weights_scale", "glm-dsa.expert_weights_norm"};

void check_missing_key(const std::string& key) {
  GgufFile src = GgufFile::open(testing_synth::tiny_header_only());
  const std::string dir = testing_gguf::scratch_dir("missing");
  const std::string p = dir + "/no-key.gguf";
  GgufWriter w;
  bool dropped = false;
  for (const auto& [k, v] : src.metadata()) {
    if (k == key) dropped = true;
    else w.set_value(k, v);
  }
  ASSERT_TRUE(dropped) << key << " is not in the synthesized file";
  w.write(p);
  GgufFile f = GgufFile::open(p);
  try {
    ModelConfig::from_gguf(f);
    ADD_FAILURE() << "no error without " << key;
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'" + key + "'"), std::string::npos) << m;
    EXPECT_NE(m.find(p), std::string::npos) << m;
  }
  std::filesystem::remove_all(dir);
}

TEST(gguf_reader, missing_key_negative_control) {
  // The unmodified metadata (no tensors) must parse: the failures above come from the dropped key only.
  GgufFile src = GgufFile::open(testing_synth::tiny_header_only());
  EXPECT_NO_THROW(ModelConfig::from_gguf(src));
}

TEST(gguf_reader, deepseek32_accepted) {
  const std::string dir = testing_gguf::scratch_dir("ds32");
  synth::Options o;
  o.seed = 5;
  o.config.arch = Arch::DeepSeek32;
  o.config.arch_name = "deepseek32";
  o.config.rope_scaling_factor = 40;
  o.config.rope_scaling_orig_ctx = 4096;
  o.config.rope_yarn_log_multiplier = 0.1;
  const auto paths = synth::write_model(o, dir + "/ds.gguf");
  GgufFile f = GgufFile::open(paths[0]);
  EXPECT_EQ(f.get_string("general.architecture"), "deepseek32");
  EXPECT_NE(f.find("deepseek32.block_count"), nullptr);
  EXPECT_EQ(f.find("glm-dsa.block_count"), nullptr);
  ModelConfig c = ModelConfig::from_gguf(f);
  EXPECT_EQ(c.arch, Arch::DeepSeek32);
  EXPECT_TRUE(c.indexer_neox());
  EXPECT_NEAR(c.rope_scaling_factor, 40.0, 1e-6);
  EXPECT_EQ(c.rope_scaling_orig_ctx, 4096);
  EXPECT_NO_THROW(validate_weights(f, c));
  // Negative control: any other architecture is refused by name.
  GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.set_value(k, v);
  w.set_string("general.architecture", "llama");
  w.write(dir + "/llama.gguf");
  try {
    ModelConfig::from_gguf(GgufFile::open(dir + "/llama.gguf"));
    ADD_FAILURE() << "architecture llama accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(gguf_reader, shared_tiny_model_opens) {
  const std::string p = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
  if (!std::filesystem::exists(p)) GTEST_SKIP() << "skipped: " << p << " not present";
  GgufFile f = GgufFile::open(p);
  EXPECT_EQ(f.tensors().size(), 90u);
  ModelConfig c = ModelConfig::from_gguf(f);
  EXPECT_EQ(c.n_embd, 512);
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.to_json(), testing_synth::as_stored(ModelConfig::tiny_default(), c));
  EXPECT_NO_THROW(validate_weights(f, c));
}

struct Registrar {
  Registrar() {
    auto reg = [](const std::string& name, std::function<void()> body) { test::register_case("gguf_reader", name, std::move(body)); };
    for (uint32_t v : {2u, 3u}) reg("gguf_metadata_types(version=" + std::to_string(v) + ")", [v] { check_all_types(v); });
    // general.alignment 1, 32 and 64 each have two independent cases: the GgufWriter round trip
    // (gguf_alignment) and the byte-built file (gguf_alignment_bytes); 32 and 64 also a refused file whose
    // padding is wrong (negative_gguf_padding).
    for (uint64_t a : {1ull, 8ull, 32ull, 64ull, 256ull, 4096ull})
      reg("gguf_alignment(align=" + std::to_string(a) + ")", [a] { check_alignment(a); });
    for (uint64_t a : {1ull, 32ull, 64ull})
      reg("gguf_alignment_bytes(align=" + std::to_string(a) + ")", [a] { check_alignment_bytes(a); });
    reg("negative_gguf_padding(align=32,padding=missing)", [] { check_bad_padding(32, Padding::Missing); });
    reg("negative_gguf_padding(align=64,padding=missing)", [] { check_bad_padding(64, Padding::Missing); });
    reg("negative_gguf_padding(align=64,padding=to32)", [] { check_bad_padding(64, Padding::To32); });
    for (auto [n, k] : std::vector<std::pair<int, int>>{{2, 1}, {2, 2}, {3, 1}, {3, 2}, {3, 3}})
      reg("gguf_split(shards=" + std::to_string(n) + ",open=" + std::to_string(k) + ")", [n, k] { check_split(n, k); });
    for (const char* key : kRequiredKeys) {
      const std::string k = key;
      // gtest filters read '-' as the start of negative patterns: the name spells "glm-dsa" as "glm_dsa".
      std::string shown = k;
      for (char& ch : shown)
        if (ch == '-') ch = '_';
      reg("missing_key(key=" + shown + ")", [k] { check_missing_key(k); });
    }
  }
} registrar;

}  // namespace
}  // namespace mlaconf
