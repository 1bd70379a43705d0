// suites/quant: every tensor of ../shared/models/glm-dsa-tiny.gguf dequantizes, and the SHA-256 of its
// float32 output (little-endian, ne[0] fastest) equals `deq_sha256` in the oracle's `gguf_manifest`.
// ggml's C dequantizer and gguf-py produced those digests; a single flipped bit in any tensor fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "reference/dequant/dequant.h"
#include "suites/quant/h5_read.h"
#include "suites/quant/register_case.h"
#include "fixtures/digest.h"

namespace mlaconf::test {
namespace {

using ::mlaconf::fx::sha256_hex;  // the one SHA-256 of the project (fixtures/digest.h)

const std::string kModel = shared_path("models/glm-dsa-tiny.gguf");
const std::string kOracle = shared_path("models/glm-dsa-tiny.oracle.h5");

// The manifest is JSON: {"tensors": {"NAME": {..., "deq_sha256": "<hex>", ...}, ...}}. Tensor names
// are quoted and unique, and each entry is flat, so a string search is exact here.
std::string manifest_field(const std::string& json, const std::string& tensor, const std::string& field) {
  const size_t at = json.find("\"" + tensor + "\": {");
  if (at == std::string::npos) return {};
  const size_t end = json.find('}', at);
  const std::string key = "\"" + field + "\": \"";
  const size_t k = json.find(key, at);
  if (k == std::string::npos || k > end) return {};
  const size_t v = k + key.size();
  return json.substr(v, json.find('"', v) - v);
}

void model_case() {
  // The digest itself, on the FIPS 180-4 "abc" vector, before trusting it with tensors.
  ASSERT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  if (!std::filesystem::exists(kModel) || !std::filesystem::exists(kOracle))
    GTEST_SKIP() << "skipped: " << kModel << " or its oracle not found (../shared absent)";
  H5Handle f = h5_open(kOracle);
  const std::string manifest = h5_string_attr(f.get(), "/", "gguf_manifest");
  const GgufFile gguf = GgufFile::open(kModel);
  // The manifest lists every tensor once: as many deq_sha256 entries as the file has tensors.
  size_t listed = 0;
  for (size_t at = manifest.find("\"deq_sha256\""); at != std::string::npos;
       at = manifest.find("\"deq_sha256\"", at + 1))
    ++listed;
  ASSERT_EQ(gguf.tensors().size(), listed);
  ASSERT_GT(listed, 0u);
  std::set<std::string> types;
  int checked = 0;
  for (const TensorInfo& t : gguf.tensors()) {
    const std::string want = manifest_field(manifest, t.name, "deq_sha256");
    ASSERT_EQ(want.size(), 64u) << t.name << ": no deq_sha256 in the manifest";
    const std::vector<float> v = ref::dequantize_tensor(t);
    ASSERT_EQ(static_cast<int64_t>(v.size()), t.n_elements());
    EXPECT_EQ(sha256_hex(v.data(), v.size() * sizeof(float)), want)
        << t.name << " (" << type_name(t.type) << ", " << t.shape_string() << ")";
    types.insert(type_name(t.type));
    ++checked;
  }
  EXPECT_EQ(static_cast<size_t>(checked), listed);
  // Every type the manifest says the file uses was exercised (glm-dsa-tiny: 9 types, 90 tensors).
  const size_t tu = manifest.find("\"types_used\": [");
  ASSERT_NE(tu, std::string::npos);
  for (const std::string& t : types)
    EXPECT_NE(manifest.find("\"" + t + "\"", tu), std::string::npos) << t << " missing from types_used";
  EXPECT_EQ(static_cast<size_t>(std::count(manifest.begin() + static_cast<std::ptrdiff_t>(tu),
                                           manifest.begin() + static_cast<std::ptrdiff_t>(manifest.find(']', tu)), ',')) + 1,
            types.size());
}

const bool registered =
    (register_case("quant", "dequant_model(model=glm_dsa_tiny,check=deq_sha256)", model_case), true);

}  // namespace
}  // namespace mlaconf::test
