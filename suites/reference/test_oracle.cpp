// suites/reference: the Eigen reference against the transformers float64 oracle
// (../shared/models/glm-dsa-tiny.oracle.h5): every case, every dataset it holds, judged by the judge of
// fixtures/ (oracle_judge.h: fx::compare_case) at the reference's precision, f64 and f32: the tolerance
// classes and bounds of docs/TOLERANCES.md (nmse, max_rel, cosine), index sets equal outside near-ties,
// greedy tokens equal (or diverging only at a near-tie margin); top-k gaps and margins within their
// source class's max_rel. Negative control: dense attention (the indexer ignored) fails past top_k.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "suites/common/case_registry.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "suites/reference/oracle_judge.h"

namespace mlaconf::test {
namespace {

const std::string kModel = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
const std::string kOracle = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.oracle.h5";

bool shared_present() { return std::filesystem::exists(kModel) && std::filesystem::exists(kOracle); }

// One case of the oracle (a full forward or a greedy run), judged.
template <class S>
void oracle_case(const std::string& cas) {
  if (!shared_present()) GTEST_SKIP() << "skipped: shared data absent (" << kOracle << ")";
  GgufFile f = GgufFile::open(kModel);
  judge_reference_case<S>(f, ModelConfig::from_gguf(f), kOracle, cas);
}

// Negative control: dense attention must agree on prompt12 (fewer tokens than top_k, so sparse ==
// dense) and must fail prompt200.
void dense_control_case() {
  if (!shared_present()) GTEST_SKIP() << "skipped: shared data absent (" << kOracle << ")";
  GgufFile f = GgufFile::open(kModel);
  const ModelConfig c = ModelConfig::from_gguf(f);
  judge_dense_attention(f, c, kOracle, "prompt12", true);
  judge_dense_attention(f, c, kOracle, "prompt200", false);
}

struct Registrar {
  Registrar() {
    for (const char* cas : {"prompt12", "prompt200"}) {
      std::string s = cas;
      register_case("reference", "oracle_forward(case=" + s + ",dtype=f64)", [s] { oracle_case<double>(s); });
      register_case("reference", "oracle_forward(case=" + s + ",dtype=f32)", [s] { oracle_case<float>(s); });
    }
    register_case("reference", "oracle_greedy(case=greedy200x24,dtype=f64)", [] { oracle_case<double>("greedy200x24"); });
    register_case("reference", "oracle_greedy(case=greedy200x24,dtype=f32)", [] { oracle_case<float>("greedy200x24"); });
    register_case("reference", "negative_dense_attention(case=prompt12+prompt200,dtype=f64)", [] { dense_control_case(); });
  }
} registrar;

}  // namespace
}  // namespace mlaconf::test
