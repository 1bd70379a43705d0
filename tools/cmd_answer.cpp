// mlaconf answer EXPECTED.h5 --model M.gguf --backend reference|cuda [--precision f32|f64] [--layers 0,2]
//                [--ops q_a,attn_latent_out] [--filter CASE] [--fault NAME] --out ANSWER.h5
// mlaconf answer EXPECTED.h5 --model M.gguf --backend llama.cpp [--llama-lib DIR] [--threads N] [--flash-attn auto|on|off]
//                [--filter CASE] --out ANSWER.h5
//
// --backend llama.cpp is not a replay: llama.cpp runs the fixture's own token ids from an empty cache
// (tools/llama_cpp/llama_answer.h) and every node of its graph that maps onto a dataset
// (tools/llama_cpp/tensor_map.h, docs/LLAMA_CPP.md) is written, in full_forward / decode_step cases of
// the expected names: llama.cpp took its own decisions, and compare attributes those that differ.
//
// Op-level replay: for every forward and decode case of EXPECTED (an mlaconf capture or the oracle's
// prompt cases), every op of tools/backend/op_table.h in every captured layer whose inputs the case holds
// runs on the case's OWN inputs (with the recorded decisions: attention reads the expected indexer_topk,
// the experts the expected router_ids), so nothing compounds. The outputs the case also holds are
// written as one `op_answer` case per expected case (fixtures/SCHEMA.md); `mlaconf compare EXPECTED
// ANSWER` then judges op by op and names the first failing op.
//
// Exit 0 written; 2 unusable input (unreadable fixture, a model other than the fixture's, nothing to
// answer); 3 not supported (cuda without a device, YaRN on the CUDA pipeline).
#include <cstdio>
#include <memory>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "core/json.h"
#include "core/model_config.h"
#include "core/text_escape.h"
#include "core/weight_layout.h"
#include "fixtures/digest.h"
#include "fixtures/fixture_file.h"
#include "fixtures/schema.h"
#include "tools/backend/backend.h"
#include "tools/backend/op_table.h"
#include "tools/command.h"
#include "tools/llama_cpp/llama_answer.h"
#include "tools/settings.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {

struct AnswerArgs {
  std::string expected, model, out, backend = "reference", precision = "f32", layers, ops, filter, fault, llama_lib, kernel_config;
  int threads = 2;
  std::string flash_attn = "auto";
  bool quiet = false;
};


std::string json_list(const std::vector<std::string>& v) { return json_text(Json(v), -1); }

std::string layer_path(int l, const std::string& name) { return "layers/" + std::to_string(l) + "/" + name; }

// The layers a case holds datasets of (ascending).
std::set<int> case_layers(const fx::FixtureFile& E, const std::string& c) {
  std::set<int> s;
  for (const auto& p : E.case_datasets(c))
    if (int l = fx::layer_of(p); l >= 0) s.insert(l);
  return s;
}

// The answer of one expected case: every op whose inputs it holds and one of whose outputs it holds.
struct CaseAnswer {
  fx::CaseData data;
  std::vector<std::string> answers;
};

CaseAnswer answer_case(const fx::FixtureFile& E, const std::string& ec, be::Backend& eng, const ModelConfig& c,
                       const std::set<int>& only_layers, const std::set<std::string>& only_ops, std::set<int>& used_layers) {
  CaseAnswer a;
  auto attrs = E.case_attrs(ec);
  auto pit = attrs.find("pos0");
  const int64_t pos0 = pit == attrs.end() || pit->second.is_string ? 0 : static_cast<int64_t>(pit->second.d);
  for (int l : case_layers(E, ec)) {
    if (!only_layers.empty() && !only_layers.count(l)) continue;
    if (l >= c.n_layer_run()) throw InputError(E.path() + ": case " + ec + " holds layer " + std::to_string(l) + ", beyond the model's layers");
    for (const be::OpSpec& s : be::op_table()) {
      if (!c.layer_is(s.kind, l)) continue;
      if (!only_ops.empty() && !only_ops.count(s.op)) continue;
      bool have_inputs = true, wanted = false;
      for (const std::string& n : s.inputs) have_inputs = have_inputs && E.has(ec, layer_path(l, n));
      for (const std::string& n : s.outputs) wanted = wanted || E.has(ec, layer_path(l, n));
      if (!have_inputs || !wanted) continue;
      be::Tensors in;
      for (const std::string& n : s.inputs) {
        fx::Array x = E.read(ec, layer_path(l, n));
        in[n] = be::HostTensor{x.shape, std::move(x.v)};
      }
      be::Tensors out = eng.replay(l, s.op, in, pos0);
      for (const std::string& n : s.outputs) {
        const std::string p = layer_path(l, n);
        if (!E.has(ec, p)) continue;
        auto it = out.find(n);
        if (it == out.end()) throw std::logic_error("op replay of " + s.op + " did not produce " + n);
        fx::Array arr;
        arr.dtype = fx::storage_dtype(fx::spec_for(p)->cls);
        arr.shape = it->second.shape;
        arr.v = std::move(it->second.v);
        a.data.datasets[p] = std::move(arr);
        a.answers.push_back(p);
      }
      used_layers.insert(l);
      a.data.layer_moe[l] = c.is_moe_layer(l) ? 1 : 0;
    }
  }
  if (a.answers.empty()) return a;
  fx::Array ids = E.read(ec, "input_ids");
  ids.dtype = fx::Dtype::I32;
  a.data.datasets["input_ids"] = std::move(ids);
  a.data.name = ec;
  a.data.attrs[fx::attr::kKind] = "op_answer";
  a.data.attrs[fx::attr::kPrecision] = eng.precision();
  a.data.attrs[fx::attr::kBackend] = eng.describe();
  a.data.attrs["answers"] = json_list(a.answers);
  a.data.int_attrs["pos0"] = pos0;
  return a;
}

// The root attributes that tie an answer to its model (compare refuses an answer of another model).
void model_attrs(fx::FixtureData& fd, const std::string& model, const GgufFile& f, const ModelConfig& c, const std::vector<std::string>& used) {
  const std::string base = model.substr(model.find_last_of('/') == std::string::npos ? 0 : model.find_last_of('/') + 1);
  fd.attrs[fx::attr::kModelConfig] = c.to_json();
  fd.attrs[fx::attr::kGgufFile] = base;
  fd.int_attrs[fx::attr::kGgufSize] = static_cast<int64_t>(f.total_file_size());
  fd.attrs[fx::attr::kGgufDigest] = fx::gguf_digest(f, used);
  fd.attrs[fx::attr::kGgufDigestMethod] = fx::kDigestMethod;
  fd.attrs[fx::attr::kGgufHeaderDigest] = fx::gguf_header_digest(f);
  fd.attrs[fx::attr::kGgufTensorDigests] = fx::gguf_tensor_digests_json(f, used);
  fd.attrs[fx::attr::kGgufTensorSha256] = fx::gguf_small_tensor_sha256_json(f, used);
}

// --backend llama.cpp: llama.cpp runs the fixture's token ids; its graph's nodes are the answer.
void run_llama_cpp(const AnswerArgs& a, const std::string& command_line, const GgufFile& f, const ModelConfig& c, const fx::FixtureFile& E) {
  if (!a.layers.empty() || !a.ops.empty() || !a.fault.empty())
    throw InputError("--backend llama.cpp answers every dataset llama.cpp exposes: --layers, --ops and --fault are for the replay backends");
  if (a.threads < 1 || a.threads > 1024) throw InputError("--threads: " + std::to_string(a.threads) + " is not in [1, 1024]");
  llamacpp::AnswerOptions o;
  o.lib_dir = a.llama_lib;
  o.filter = a.filter;
  o.threads = a.threads;
  o.flash_attn = a.flash_attn == "on" ? 1 : a.flash_attn == "off" ? 0 : -1;
  o.quiet = a.quiet;
  o.python = settings().llama_python;
  o.log = settings().llama_log;
  llamacpp::AnswerResult r = llamacpp::answer_fixture(E, a.model, c, o);
  if (r.n_datasets == 0) throw InputError(a.expected + ": llama.cpp exposed no dataset this fixture holds");
  fx::FixtureData fd = std::move(r.data);
  std::vector<std::string> used;
  for (int l = 0; l < c.n_layer_run(); ++l)
    for (const auto& s : layer_tensor_specs(c, l)) used.push_back(s.name);
  model_attrs(fd, a.model, f, c, used);
  fd.attrs[fx::attr::kPrecision] = "llamacpp-cpu";
  fd.attrs[fx::attr::kBackend] = "llama.cpp";
  fd.attrs["llama_cpp_version"] = r.version;
  fd.attrs["llama_cpp_lib"] = r.lib_dir;
  fd.attrs["llama_cpp_unmapped"] = json_list(r.unmapped);
  fd.attrs["llama_cpp_missing"] = json_list(r.missing);
  fd.attrs["answer_command"] = command_line;
  const size_t n_cases = fd.cases.size();
  fx::write_fixture(a.out, std::move(fd));
  if (!a.quiet) {
    std::fprintf(stderr, "answer: llama.cpp nodes not mapped (%zu):", r.unmapped.size());
    for (const auto& u : r.unmapped) std::fprintf(stderr, " %s;", escape_text(u).c_str());
    std::fprintf(stderr, "\n");
    for (const auto& m : r.missing) std::fprintf(stderr, "answer: not answered: %s\n", escape_text(m).c_str());
  }
  std::printf("answer: %zu datasets in %zu case(s) by llama.cpp %s (%s) -> %s\n", r.n_datasets, n_cases, r.version.c_str(),
              escape_text(r.lib_dir).c_str(), escape_text(a.out).c_str());
}

void run_answer(const AnswerArgs& a, const std::string& command_line) {
  // Before any work: the files (the answer is none of the inputs) and the fault's name.
  require_regular_file(a.expected, "EXPECTED");
  require_regular_file(a.model, "--model");
  if (!a.fault.empty()) require_fault_name(a.fault);
  GgufFile f = GgufFile::open(a.model);
  std::vector<std::string> inputs = {a.expected};
  for (const GgufShard& sh : f.shards()) inputs.push_back(sh.path);
  require_output_path(a.out, "--out", inputs);
  fx::FixtureFile E(a.expected);
  ModelConfig c = ModelConfig::from_gguf(f);
  c.validate(a.model);
  // The fixture must be of this model: a replay on other weights answers nothing.
  if (E.dims()) {
    const std::string d = E.dims()->difference(fx::ModelDims::from_config(c));
    if (!d.empty()) throw InputError(a.expected + " is a fixture of another model than " + a.model + ": " + d);
  }
  const std::string he = E.root_string(fx::attr::kGgufHeaderDigest);
  if (!he.empty() && he != fx::gguf_header_digest(f))
    throw InputError(a.expected + " is a fixture of another model than " + a.model + " (GGUF header digests differ)");

  if (a.backend == "llama.cpp") {
    run_llama_cpp(a, command_line, f, c, E);
    return;
  }

  std::set<int> only_layers;
  for (const auto& s : split_list(a.layers)) {
    try {
      size_t n = 0;
      const int l = std::stoi(s, &n);
      if (n != s.size() || l < 0) throw std::invalid_argument(s);
      only_layers.insert(l);
    } catch (const std::exception&) {
      throw InputError("--layers: '" + s + "' is not a layer index");
    }
  }
  std::set<std::string> only_ops;
  for (const auto& s : split_list(a.ops)) {
    bool known = false;
    for (const auto& o : be::op_table()) known = known || s == o.op;
    if (!known) {
      std::string names;
      for (const auto& o : be::op_table())
        if (names.find(std::string(o.op) + ",") == std::string::npos) names += std::string(o.op) + ",";
      throw InputError("--ops: unknown op '" + s + "' (known: " + names.substr(0, names.size() - 1) + ")");
    }
    only_ops.insert(s);
  }
  std::vector<std::string> cases;
  for (const auto& ec : E.cases()) {
    const std::string k = E.case_kind(ec);
    if (k != "full_forward" && k != "decode_step") continue;
    if (!a.filter.empty() && a.filter != ec) continue;
    cases.push_back(ec);
  }
  if (cases.empty())
    throw InputError(a.filter.empty() ? a.expected + ": no forward or decode case to answer" : "no forward or decode case named " + a.filter + " in " + a.expected);

  be::BackendOptions bo;
  bo.precision = a.precision;
  bo.fault = a.fault;
  bo.max_ctx = 16;  // replay keeps no cache of its own
  bo.kernels = kernel_config(a.kernel_config);
  std::unique_ptr<be::Backend> eng = be::make_backend(a.backend, f, c, bo);

  fx::FixtureData fd;
  std::set<int> used_layers;
  size_t n_answers = 0;
  for (const auto& ec : cases) {
    CaseAnswer ca = answer_case(E, ec, *eng, c, only_layers, only_ops, used_layers);
    if (ca.answers.empty()) continue;
    n_answers += ca.answers.size();
    if (!a.quiet) std::fprintf(stderr, "answer: %s: %zu datasets\n", escape_text(ec).c_str(), ca.answers.size());  // a name from the file
    fd.cases.push_back(std::move(ca.data));
  }
  if (fd.cases.empty())
    throw InputError(a.expected + ": no case holds the inputs and outputs of an op" +
                     (only_layers.empty() && only_ops.empty() ? std::string() : " (within --layers / --ops)"));

  std::vector<std::string> used;
  for (int l : used_layers)
    for (const auto& s : layer_tensor_specs(c, l)) used.push_back(s.name);
  model_attrs(fd, a.model, f, c, used);
  fd.attrs[fx::attr::kPrecision] = eng->precision();
  fd.attrs[fx::attr::kBackend] = eng->name();
  fd.attrs["answer_command"] = command_line;
  const size_t n_cases = fd.cases.size();
  fx::write_fixture(a.out, std::move(fd));
  std::printf("answer: %zu datasets in %zu case(s) by %s -> %s\n", n_answers, n_cases, eng->describe().c_str(), escape_text(a.out).c_str());
}

CommandRegistration reg(45, [](CLI::App& root) {
  auto a = std::make_shared<AnswerArgs>();
  CLI::App* c = root.add_subcommand(
      "answer", "Replay every op of a fixture on its own inputs with a backend, or run llama.cpp on its token ids (--backend llama.cpp), and write the answers (then: compare EXPECTED ANSWER)");
  c->add_option("expected", a->expected, "fixture (.h5) whose op inputs are replayed: an mlaconf capture or the oracle")->required();
  c->add_option("--model", a->model, "the GGUF model the fixture was captured from")->required();
  c->add_option("--out", a->out, "answer file to write (.h5), written atomically")->required();
  c->add_option("--backend", a->backend, "reference or cuda (op replay), or llama.cpp (runs the fixture's token ids)")
      ->check(CLI::IsMember({"reference", "cuda", "llama.cpp"}))
      ->capture_default_str();
  c->add_option("--llama-lib", a->llama_lib, "llama.cpp: folder holding libllama.so (default: the llama_cpp Python package's lib folder)");
  c->add_option("--threads", a->threads, "llama.cpp: CPU threads")->capture_default_str();
  c->add_option("--flash-attn", a->flash_attn, "llama.cpp: flash attention auto (its default), on or off (its other attention path)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  c->add_option("--precision", a->precision, "reference precision (the CUDA pipeline is f16 storage)")
      ->check(CLI::IsMember({"f32", "f64"}))
      ->capture_default_str();
  c->add_option("--layers", a->layers, "only these layers (comma list; default: every layer the fixture holds)");
  c->add_option("--ops", a->ops, "only these ops (comma list of op names = their first output dataset)");
  c->add_option("--filter", a->filter, "only this expected case")->check(non_empty());
  c->add_option("--fault", a->fault, "negative control: dense-attention (both backends) or a fault of optimized/faults.h (cuda)");
  c->add_flag("--quiet", a->quiet, "no per-case lines");
  add_kernel_config_option(c, &a->kernel_config);
  c->callback([a] {
    if (!a->kernel_config.empty() && a->backend != "cuda") throw InputError("answer: --kernel-config needs --backend cuda");
    std::ostringstream cl;
    cl << "mlaconf answer " << a->expected << " --model " << a->model << " --backend " << a->backend;
    if (a->backend == "reference") cl << " --precision " << a->precision;
    if (a->backend == "llama.cpp" && !a->llama_lib.empty()) cl << " --llama-lib " << a->llama_lib;
    if (a->backend == "llama.cpp" && a->flash_attn != "auto") cl << " --flash-attn " << a->flash_attn;
    if (!a->layers.empty()) cl << " --layers " << a->layers;
    if (!a->ops.empty()) cl << " --ops " << a->ops;
    if (!a->filter.empty()) cl << " --filter '" << a->filter << "'";
    if (!a->fault.empty()) cl << " --fault " << a->fault;
    if (a->backend == "cuda") cl << " --kernel-config " << cuda::to_string(kernel_config(a->kernel_config));
    cl << " --out " << a->out;
    run_answer(*a, cl.str());  // NotSupported: main() prints it and exits 3
    set_exit_code(kExitOk);
  });
});

}  // namespace
}  // namespace mlaconf::cli
