#include "suites/robustness/hostile_corpus.h"

#include <filesystem>
#include <functional>
#include <set>

#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "suites/core/gguf_bytes.h"
#include "synth/synth.h"

namespace mlaconf::hostile {
namespace {
using testing_gguf::Bytes;

std::string num(uint64_t v) { return std::to_string(v); }

// A minimal valid file (one F32 {8} tensor), with `kv` inserted as its only metadata.
std::vector<uint8_t> one_kv(const std::function<void(Bytes&)>& kv) {
  Bytes b;
  b.header(3, 1, 1);
  kv(b);
  b.tinfo("w", {8}, 0, 0).pad_to(32).fill(32, 1);
  return b.b;
}
// A file with no metadata and the given tensor infos, then `data` bytes of tensor data.
std::vector<uint8_t> tensors(const std::function<void(Bytes&)>& infos, int n, size_t data) {
  Bytes b;
  b.header(3, static_cast<uint64_t>(n), 0);
  infos(b);
  b.pad_to(32).fill(data, 3);
  return b.b;
}

// Rewrites a valid model through GgufWriter: `kv` may change or drop keys, `t` may change or drop tensors.
struct Edit {
  std::function<bool(const std::string& key, GgufWriter& w, const GgufValue& v)> kv;  // false: copy as is
  std::function<bool(const TensorInfo& t, GgufWriter& w)> tensor;                     // false: copy as is
};
std::vector<uint8_t> rewrite(const std::vector<uint8_t>& valid, const Edit& e) {
  const std::string dir = testing_gguf::scratch_dir("rewrite");
  testing_gguf::write_bytes(dir + "/in.gguf", valid);
  std::vector<uint8_t> out;
  {
    GgufFile f = GgufFile::open(dir + "/in.gguf");
    GgufWriter w(f.shards()[0].alignment);
    for (const auto& [k, v] : f.metadata())
      if (!(e.kv && e.kv(k, w, v))) w.set_value(k, v);
    for (const TensorInfo& t : f.tensors()) {
      if (e.tensor && e.tensor(t, w)) continue;
      std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
      w.add_tensor(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + t.nbytes));
    }
    out = w.bytes();
  }
  std::filesystem::remove_all(dir);
  return out;
}

}  // namespace

bool matches(const std::string& message, const std::string& expect) {
  size_t start = 0;
  while (true) {
    size_t bar = expect.find('|', start);
    std::string alt = expect.substr(start, bar == std::string::npos ? std::string::npos : bar - start);
    if (message.find(alt) != std::string::npos) return true;
    if (bar == std::string::npos) return false;
    start = bar + 1;
  }
}

std::vector<uint8_t> small_valid_model() {
  const std::string dir = testing_gguf::scratch_dir("small-model");
  synth::Options o;
  o.seed = 1;
  o.config = with_dims(o.config, {.layers = 2, .n_embd = 64, .n_head = 2, .q_lora = 32, .kv_lora = 32, .qk_nope = 32, .qk_rope = 16,
                                  .v_head = 32, .idx_heads = 2, .idx_dim = 32, .top_k = 8, .experts = 4, .experts_used = 2,
                                  .ff_exp = 32, .ff = 64, .vocab = 320, .dense_lead = 1});
  const std::string p = synth::write_model(o, dir + "/small.gguf").front();
  auto b = testing_gguf::read_bytes(p);
  std::filesystem::remove_all(dir);
  return b;
}

std::vector<Case> corpus(const std::vector<uint8_t>& valid, int cuts) {
  std::vector<Case> v;
  auto add = [&](std::string kind, std::vector<uint8_t> bytes, std::string expect) {
    Case c;
    c.name = "hostile(kind=" + kind + ")";
    c.file = kind + ".gguf";
    c.bytes = std::move(bytes);
    c.expect = std::move(expect);
    v.push_back(std::move(c));
  };

  // --- truncation at many cut points (header, metadata, tensor infos, data) ---
  uint64_t data_end = 0;
  {
    const std::string dir = testing_gguf::scratch_dir("valid-probe");
    testing_gguf::write_bytes(dir + "/v.gguf", valid);
    GgufFile f = GgufFile::open(dir + "/v.gguf");
    for (const TensorInfo& t : f.tensors())
      data_end = std::max(data_end, f.shards()[0].data_offset + t.offset + t.nbytes);
    std::filesystem::remove_all(dir);
  }
  std::set<uint64_t> at;
  for (uint64_t k = 0; k < 40; ++k) at.insert(k);
  for (int k = 0; k < cuts; ++k) at.insert(40 + (data_end - 41) * static_cast<uint64_t>(k) / static_cast<uint64_t>(cuts));
  at.insert(data_end - 1);
  for (uint64_t a : at) {
    if (a >= data_end) continue;  // cut in the final padding: still a complete file
    Case c;
    c.name = "hostile(kind=truncated,at=" + num(a) + ")";
    c.file = "truncated-" + num(a) + ".gguf";
    c.bytes.assign(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(a));
    c.expect = "truncated|absurd|past the end";
    v.push_back(std::move(c));
  }

  // --- header ---
  add("empty", {}, "truncated");
  add("bad_magic", Bytes().header(3, 0, 0, 0x4c4d4747u /* "GGML" */).b, "not a GGUF file");
  add("bad_magic_zeros", Bytes().zeros(64).b, "not a GGUF file");
  add("text_file", Bytes().raw(std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', '\n'}).b, "not a GGUF file");
  add("version_1", Bytes().header(1, 0, 0).zeros(16).b, "unsupported GGUF version 1");
  add("version_4", Bytes().header(4, 0, 0).b, "unsupported GGUF version 4");
  add("version_0", Bytes().header(0, 0, 0).b, "unsupported GGUF version 0");
  add("version_big_endian", Bytes().header(0x03000000u, 0, 0).b, "big-endian");
  add("absurd_tensor_count", Bytes().header(3, uint64_t{1} << 62, 0).b, "absurd tensor count");
  add("absurd_kv_count", Bytes().header(3, 0, ~uint64_t{0}).b, "absurd metadata count");
  add("header_only_no_counts", Bytes().u32(0x46554747u).u32(3).b, "truncated");

  // --- metadata ---
  add("absurd_key_length", Bytes().header(3, 0, 1).u64(~uint64_t{0}).zeros(16).b, "absurd string length");
  add("absurd_string_value_length", one_kv([](Bytes& b) { b.str("k").u32(8).u64(uint64_t{1} << 40); }), "absurd string length");
  add("absurd_array_length", one_kv([](Bytes& b) { b.str("k").u32(9).u32(4).u64(uint64_t{1} << 61); }), "absurd array length");
  add("absurd_string_array_length", one_kv([](Bytes& b) { b.str("k").u32(9).u32(8).u64(uint64_t{1} << 40); }), "absurd array length");
  add("absurd_string_in_array", one_kv([](Bytes& b) { b.str("k").u32(9).u32(8).u64(1).u64(uint64_t{1} << 50); }), "absurd string length");
  add("unknown_value_type", one_kv([](Bytes& b) { b.str("k").u32(13).u32(0); }), "unknown metadata value type 13");
  add("unknown_value_type_max", one_kv([](Bytes& b) { b.str("k").u32(0xFFFFFFFFu).u32(0); }), "unknown metadata value type");
  add("unknown_array_elem_type", one_kv([](Bytes& b) { b.str("k").u32(9).u32(77).u64(1).u32(0); }), "unknown array element type 77");
  add("nested_array", one_kv([](Bytes& b) { b.str("k").u32(9).u32(9).u64(1).u32(4).u64(0); }), "nested array");
  add("bool_not_0_or_1", one_kv([](Bytes& b) { b.str("k").u32(7).u8(2); }), "neither 0 nor 1");
  add("u64_above_2_63", one_kv([](Bytes& b) { b.str("k").u32(10).u64(~uint64_t{0}); }), "larger than 2^63");
  add("duplicate_key", Bytes().header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2).b, "duplicate metadata key 'a.b'");
  add("alignment_zero", one_kv([](Bytes& b) { b.kv_u32("general.alignment", 0); }), "not a power of two");
  add("alignment_48", one_kv([](Bytes& b) { b.kv_u32("general.alignment", 48); }), "not a power of two");
  add("alignment_not_u32", one_kv([](Bytes& b) { b.kv_str("general.alignment", "32"); }), "general.alignment must be u32");

  // --- tensor infos ---
  add("tensor_data_past_eof", tensors([](Bytes& b) { b.tinfo("w", {8}, 0, 1 << 20); }, 1, 32), "past the end");
  add("tensor_data_runs_over_eof", tensors([](Bytes& b) { b.tinfo("w", {64}, 0, 0); }, 1, 100), "past the end");
  add("tensor_offset_near_u64_max", tensors([](Bytes& b) { b.tinfo("w", {8}, 0, ~uint64_t{0} - 31); }, 1, 32), "past the end");
  add("overlapping_offsets", tensors([](Bytes& b) { b.tinfo("a", {16}, 0, 0).tinfo("b", {16}, 0, 32); }, 2, 128), "overlap");
  add("same_offset", tensors([](Bytes& b) { b.tinfo("a", {8}, 0, 0).tinfo("b", {8}, 0, 0); }, 2, 64), "overlap");
  add("misaligned_offset", tensors([](Bytes& b) { b.tinfo("w", {8}, 0, 16); }, 1, 64), "is not aligned to 32");
  for (uint32_t id : {4u, 5u, 31u, 33u, 99u, 0xFFFFFFFFu})
    add("unknown_ggml_type_" + num(id), tensors([id](Bytes& b) { b.tinfo("w", {256}, id, 0); }, 1, 1024),
        "unknown ggml type id " + num(id));
  add("ne0_not_multiple_of_block_Q4_K", tensors([](Bytes& b) { b.tinfo("w", {100, 2}, 12, 0); }, 1, 1024), "is not a multiple of the Q4_K block size 256");
  add("ne0_not_multiple_of_block_Q8_0", tensors([](Bytes& b) { b.tinfo("w", {40}, 8, 0); }, 1, 64), "is not a multiple of the Q8_0 block size 32");
  add("duplicate_tensor_name", tensors([](Bytes& b) { b.tinfo("w", {8}, 0, 0).tinfo("w", {8}, 0, 32); }, 2, 64), "duplicate tensor name 'w'");
  add("dims_product_overflow", tensors([](Bytes& b) { b.tinfo("w", {int64_t{1} << 40, int64_t{1} << 40}, 0, 0); }, 1, 32), "overflows 64 bits");
  add("dims_product_overflow_4d", tensors([](Bytes& b) { b.tinfo("w", {65536, 65536, 65536, 65536}, 0, 0); }, 1, 32), "overflows 64 bits");
  add("dims_product_overflow_with_zero", tensors([](Bytes& b) { b.tinfo("w", {0, int64_t{1} << 40, int64_t{1} << 40}, 0, 0); }, 1, 32), "overflows 64 bits");
  add("byte_size_overflow", tensors([](Bytes& b) { b.tinfo("w", {int64_t{1} << 31, int64_t{1} << 31}, 0, 0); }, 1, 32), "overflows 64 bits");
  add("negative_dimension", tensors([](Bytes& b) { b.tinfo("w", {8, -1}, 0, 0); }, 1, 32), "negative dimension");
  add("zero_dims", tensors([](Bytes& b) { b.str("w").u32(0).u32(0).u64(0); }, 1, 32), "0 dimensions");
  add("five_dims", tensors([](Bytes& b) { b.tinfo("w", {1, 1, 1, 1, 1}, 0, 0); }, 1, 32), "5 dimensions");
  add("long_tensor_name", tensors([](Bytes& b) { b.tinfo(std::string(100, 'x'), {8}, 0, 0); }, 1, 32), "longer than 63 bytes");
  add("absurd_tensor_name_length", Bytes().header(3, 1, 0).u64(uint64_t{1} << 60).zeros(64).b, "absurd string length");

  // --- a model that parses but is not a usable glm-dsa model ---
  add("missing_key", rewrite(valid, {[](const std::string& k, GgufWriter&, const GgufValue&) { return k == "glm-dsa.expert_count"; }, nullptr}),
      "missing metadata key 'glm-dsa.expert_count'");
  add("wrong_key_type", rewrite(valid, {[](const std::string& k, GgufWriter& w, const GgufValue&) {
                                          if (k != "glm-dsa.block_count") return false;
                                          w.set_string(k, "two");
                                          return true;
                                        }, nullptr}),
      "'glm-dsa.block_count' is string");
  add("wrong_architecture", rewrite(valid, {[](const std::string& k, GgufWriter& w, const GgufValue&) {
                                              if (k != "general.architecture") return false;
                                              w.set_string(k, "llama");
                                              return true;
                                            }, nullptr}),
      "architecture 'llama' is not supported");
  add("config_out_of_range", rewrite(valid, {[](const std::string& k, GgufWriter& w, const GgufValue&) {
                                               if (k != "glm-dsa.attention.key_length") return false;
                                               w.set_u32(k, 7);
                                               return true;
                                             }, nullptr}),
      "invalid model config");
  add("absurd_top_k", rewrite(valid, {[](const std::string& k, GgufWriter& w, const GgufValue&) {
                                        if (k != "glm-dsa.attention.indexer.top_k") return false;
                                        w.set_u32(k, 2147483647u);  // issue 38: sized a [T, top_k] selection
                                        return true;
                                      }, nullptr}),
      "attention.indexer.top_k = 2147483647 is out of range");
  add("missing_tensor", rewrite(valid, {nullptr, [](const TensorInfo& t, GgufWriter&) { return t.name == "blk.0.attn_q_b.weight"; }}),
      "missing tensor 'blk.0.attn_q_b.weight'");
  add("shape_inconsistent_with_config", rewrite(valid, {nullptr, [](const TensorInfo& t, GgufWriter& w) {
                                                          if (t.name != "blk.1.ffn_gate_exps.weight") return false;
                                                          // Same bytes, experts and rows swapped: parses, disagrees with the config.
                                                          w.add_tensor(t.name, t.type, {t.ne[0], t.ne[2], t.ne[1]},
                                                                       std::vector<uint8_t>(t.data, t.data + t.nbytes));
                                                          return true;
                                                        }}),
      "'blk.1.ffn_gate_exps.weight' has shape");
  add("norm_not_f32", rewrite(valid, {nullptr, [](const TensorInfo& t, GgufWriter& w) {
                                        if (t.name != "blk.0.attn_norm.weight") return false;
                                        w.add_tensor(t.name, GgmlType::F16, {t.ne[0]}, std::vector<uint8_t>(t.data, t.data + t.nbytes / 2));
                                        return true;
                                      }}),
      "expected F32");

  // --- split models ---
  {
    auto shard = [](int no, int count, int total, std::vector<std::pair<std::string, uint64_t>> ts) {
      Bytes b;
      b.header(3, ts.size(), 3);
      b.str("split.no").u32(2).put<uint16_t>(static_cast<uint16_t>(no));
      b.str("split.count").u32(2).put<uint16_t>(static_cast<uint16_t>(count));
      b.str("split.tensors.count").u32(5).put<int32_t>(total);
      for (auto& [n, off] : ts) b.tinfo(n, {8}, 0, off);
      b.pad_to(32).fill(32 * ts.size(), 9);
      return b.b;
    };
    auto split_case = [&](std::string kind, std::vector<uint8_t> first, std::vector<std::vector<uint8_t>> rest,
                          std::string expect, int count) {
      Case c;
      c.name = "hostile(kind=" + kind + ")";
      c.file = make_split_name(kind, 1, count);
      c.bytes = std::move(first);
      for (size_t k = 0; k < rest.size(); ++k)
        if (!rest[k].empty()) c.siblings.emplace_back(make_split_name(kind, static_cast<int>(k) + 2, count), std::move(rest[k]));
      c.expect = std::move(expect);
      v.push_back(std::move(c));
    };
    split_case("split_missing_shard", shard(0, 3, 3, {{"a", 0}}), {shard(1, 3, 3, {{"b", 0}}), {}}, "cannot open", 3);
    split_case("split_no_mismatch", shard(0, 2, 2, {{"a", 0}}), {shard(5, 2, 2, {{"b", 0}})}, "split.no is 5, expected 1", 2);
    split_case("split_tensor_in_two_shards", shard(0, 2, 2, {{"a", 0}}), {shard(1, 2, 2, {{"a", 0}})}, "more than one shard", 2);
    split_case("split_tensor_count_mismatch", shard(0, 2, 7, {{"a", 0}}), {shard(1, 2, 7, {{"b", 0}})}, "split.tensors.count says 7", 2);
    split_case("split_damaged_second_shard", shard(0, 2, 2, {{"a", 0}}), {Bytes().header(3, 0, 0, 0).b}, "not a GGUF file", 2);
  }
  return v;
}

}  // namespace mlaconf::hostile
