// suites/quant: dequantize_rows / dequantize_tensor on partial row ranges and 3-D tensors (per-expert
// slices), and clear InputErrors for types mlaconf does not dequantize and for bad ranges or shapes.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ggml_types.h"
#include "core/gguf.h"
#include "reference/dequant/dequant.h"
#include "suites/quant/float_compare.h"
#include "suites/quant/random_blocks.h"
#include "suites/quant/register_case.h"

namespace mlaconf::test {
namespace {

const std::string kModel = shared_path("models/glm-dsa-tiny.gguf");

// A tensor over caller-owned bytes, as the GGUF reader would describe it.
TensorInfo make_tensor(const std::string& name, GgmlType t, std::array<int64_t, 4> ne, const std::vector<uint8_t>& bytes) {
  TensorInfo ti;
  ti.name = name;
  ti.type = t;
  ti.n_dims = ne[2] > 1 ? 3 : 2;
  ti.ne = ne;
  ti.nbytes = bytes.size();
  ti.data = bytes.data();
  return ti;
}

// Every row range of a 3-D tensor {ne0, 3, 4} equals the same slice of the whole tensor, and equals the
// block-level dequantize of the same bytes: rows are addressed by byte offset, not by a stale pointer.
void rows_case(GgmlType t) {
  const TypeTraits& tt = traits(t);
  const int64_t ne0 = tt.block_size == 1 ? 64 : 2 * tt.block_size;
  const std::array<int64_t, 4> ne{ne0, 3, 4, 1};
  const int64_t rows = 12, rb = row_bytes(t, ne0);
  const std::vector<uint8_t> bytes = random_blocks(t, rows * rb / tt.type_size, 77 + static_cast<uint32_t>(t));
  const TensorInfo ti = make_tensor("synthetic." + std::string(tt.name), t, ne, bytes);
  const std::vector<float> whole = ref::dequantize_tensor(ti);
  ASSERT_EQ(static_cast<int64_t>(whole.size()), rows * ne0);
  std::vector<float> flat(whole.size());
  ref::dequantize(t, bytes.data(), flat.data(), static_cast<int64_t>(flat.size()));
  EXPECT_TRUE(compare_bits(whole.data(), flat.data(), static_cast<int64_t>(flat.size())).exact());
  for (auto [r0, nr] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}, {5, 7}, {11, 1}, {0, 12}, {3, 0}}) {
    std::vector<float> part(static_cast<size_t>(nr * ne0) + 1, 99.0f);  // one sentinel past the end
    ref::dequantize_rows(ti, r0, nr, part.data());
    const BitCompare r = compare_bits(part.data(), whole.data() + r0 * ne0, nr * ne0);
    EXPECT_TRUE(r.exact()) << "rows [" << r0 << ", " << r0 + nr << "):" << r.first;
    EXPECT_EQ(part.back(), 99.0f) << "wrote past rows [" << r0 << ", " << r0 + nr << ")";
  }
  // Per "expert" (ne[2] slice): rows [e*3, e*3+3).
  for (int64_t e = 0; e < 4; ++e) {
    std::vector<float> slice(static_cast<size_t>(3 * ne0));
    ref::dequantize_rows(ti, e * 3, 3, slice.data());
    EXPECT_TRUE(compare_bits(slice.data(), whole.data() + e * 3 * ne0, 3 * ne0).exact()) << "expert " << e;
  }
}

// The tiny model's 3-D tensors, expert by expert: routed experts {512, 256, 16} and attn_k_b {192, 512, 4}.
void model_experts_case() {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "skipped: " << kModel << " not found (../shared absent)";
  const GgufFile g = GgufFile::open(kModel);
  int checked = 0;
  for (const char* name : {"blk.1.ffn_gate_exps.weight", "blk.3.ffn_up_exps.weight", "blk.2.ffn_down_exps.weight",
                           "blk.0.attn_k_b.weight", "blk.0.attn_v_b.weight"}) {
    const TensorInfo& t = g.tensor(name);
    ASSERT_EQ(t.n_dims, 3) << name;
    const std::vector<float> whole = ref::dequantize_tensor(t);
    const int64_t per = t.ne[1];  // rows per slice
    std::vector<float> slice(static_cast<size_t>(per * t.ne[0]));
    for (int64_t e = 0; e < t.ne[2]; ++e) {
      ref::dequantize_rows(t, e * per, per, slice.data());
      const BitCompare r = compare_bits(slice.data(), whole.data() + e * per * t.ne[0], per * t.ne[0]);
      EXPECT_TRUE(r.exact()) << name << " slice " << e << ":" << r.first;
    }
    // Never test on zeros: the slices carry signal.
    double ss = 0;
    for (float v : slice) ss += double(v) * v;
    EXPECT_GT(ss, 0.0) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

template <typename F>
void expect_input_error(F&& f, const std::vector<std::string>& must_mention) {
  try {
    f();
    ADD_FAILURE() << "no InputError thrown";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const std::string& s : must_mention) EXPECT_NE(msg.find(s), std::string::npos) << "message: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

void unsupported_type_case(GgmlType t) {
  const TypeTraits& tt = traits(t);
  EXPECT_FALSE(ref::can_dequantize(t));
  const std::vector<uint8_t> bytes(static_cast<size_t>(tt.type_size * 4), 0x11);
  std::vector<float> out(static_cast<size_t>(tt.block_size * 4));
  expect_input_error([&] { ref::dequantize(t, bytes.data(), out.data(), tt.block_size * 4); }, {tt.name});
  const TensorInfo ti = make_tensor("blk.0.odd.weight", t, {tt.block_size * 2, 2, 1, 1}, bytes);
  expect_input_error([&] { ref::dequantize_tensor(ti); }, {tt.name, "blk.0.odd.weight"});
}

void bad_input_case() {
  const GgmlType t = GgmlType::Q4_K;
  const std::vector<uint8_t> bytes = random_blocks(t, 4, 5);  // 2 rows of 512
  std::vector<float> out(2048);
  const TensorInfo ok = make_tensor("blk.7.ffn_up.weight", t, {512, 2, 1, 1}, bytes);
  expect_input_error([&] { ref::dequantize(t, bytes.data(), out.data(), 100); }, {"100", "256"});
  expect_input_error([&] { ref::dequantize(t, bytes.data(), out.data(), -256); }, {"Q4_K"});
  expect_input_error([&] { ref::dequantize_rows(ok, 1, 2, out.data()); }, {"blk.7.ffn_up.weight", "2 rows"});
  expect_input_error([&] { ref::dequantize_rows(ok, -1, 1, out.data()); }, {"blk.7.ffn_up.weight"});
  expect_input_error([&] { ref::dequantize_rows(ok, 0, -1, out.data()); }, {"blk.7.ffn_up.weight"});
  TensorInfo odd = make_tensor("blk.7.attn_k_b.weight", t, {192, 2, 1, 1}, bytes);  // 192 % 256 != 0
  expect_input_error([&] { ref::dequantize_tensor(odd); }, {"blk.7.attn_k_b.weight", "192", "256"});
  TensorInfo short_data = ok;
  short_data.nbytes = 144 * 3;  // claims 2 rows of 2 blocks but holds 3 blocks
  expect_input_error([&] { ref::dequantize_tensor(short_data); }, {"blk.7.ffn_up.weight", "432"});
  TensorInfo unmapped = ok;
  unmapped.data = nullptr;
  expect_input_error([&] { ref::dequantize_tensor(unmapped); }, {"blk.7.ffn_up.weight", "not mapped"});
  // A range that fits still works after all that.
  ref::dequantize_rows(ok, 1, 1, out.data());
  std::vector<float> whole(1024);
  ref::dequantize(t, bytes.data(), whole.data(), 1024);
  EXPECT_TRUE(compare_bits(out.data(), whole.data() + 512, 512).exact());
}

void coverage_case() {
  // can_dequantize agrees with core's weight-type table, both ways.
  for (uint32_t id = 0; id < 64; ++id) {
    const TypeTraits* tt = find_type(id);
    if (!tt) continue;
    EXPECT_EQ(ref::can_dequantize(tt->type), tt->weight_type) << tt->name;
  }
  EXPECT_EQ(weight_types().size(), 23u);
}

bool register_all() {
  for (GgmlType t : weight_types())
    register_case("quant", std::string("dequant_rows(type=") + type_name(t) + ",shape=3d)", [t] { rows_case(t); });
  register_case("quant", "dequant_rows(model=glm_dsa_tiny,slices=experts)", model_experts_case);
  for (GgmlType t : {GgmlType::Q8_K, GgmlType::Q8_1, GgmlType::TQ1_0, GgmlType::TQ2_0, GgmlType::NVFP4, GgmlType::I8,
                     GgmlType::I32, GgmlType::F64})
    register_case("quant", std::string("dequant_unsupported(type=") + type_name(t) + ")",
                  [t] { unsupported_type_case(t); });
  register_case("quant", "dequant_bad_input(type=Q4_K)", bad_input_case);
  register_case("quant", "dequant_coverage(types=weight_types)", coverage_case);
  return true;
}

const bool registered = register_all();

}  // namespace
}  // namespace mlaconf::test
