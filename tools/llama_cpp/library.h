// mlaconf <-> llama.cpp: libllama and libggml(-base) loaded at run time (dlopen), checked, and wrapped.
//
// Where the libraries come from: `--llama-lib DIR` (a folder holding libllama.so), else the `lib`
// folder of an installed `llama_cpp` Python package (llama-cpp-python), found by asking python3
// (AnswerOptions::python: MLACONF_PYTHON, else /usr/bin/python3, else python3 on the PATH). Whatever cannot be found, loaded or
// verified (abi.h) is NotSupported (exit 3) with the reason; nothing is guessed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tools/llama_cpp/abi.h"

namespace mlaconf::llamacpp {

// A folder holding libllama.so: `dir` when given (InputError when it holds none), else the llama_cpp
// package's lib folder as `python` finds it ("" = /usr/bin/python3, else the PATH's; NotSupported
// "llama_cpp not installed" when there is none).
std::string find_library_dir(const std::string& dir, const std::string& python = "");

class Library {
 public:
  // dlopens libggml-base, libggml and libllama from `dir`, resolves every function used, runs the ABI
  // checks of abi.h. NotSupported on any failure. `log`: llama.cpp's own log lines go to stderr (else dropped).
  explicit Library(const std::string& dir, bool log = false);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& version() const { return version_; }      // llama_version() (+ ggml_version/commit)
  const abi::ContextLayout& layout() const { return *layout_; }

  // One llama.cpp model and context: prefill and decode with an eval callback on every node.
  struct Session;
  // n_ctx: cache cells; n_batch: the largest pass (one ubatch); threads: CPU threads; flash_attn: -1 auto
  // (llama.cpp's default), 0 off, 1 on.
  Session* open(const std::string& gguf, uint32_t n_ctx, uint32_t n_batch, int threads, int flash_attn, abi::EvalCallback cb,
                void* user);
  // Runs one pass of `ids` at positions pos0.. (every position outputs logits). Throws NotSupported with
  // llama_decode's status when it fails.
  void decode(Session* s, const std::vector<int32_t>& ids, int32_t pos0);
  void close(Session* s);

  // Node accessors (ggml-base): name, op ("MUL_MAT", "ROPE", ...), bytes, contiguous copy of the data.
  std::string name(const abi::TensorHead* t) const;
  std::string op(const abi::TensorHead* t) const;
  // The values of a F32 / F16 / I32 tensor as doubles, row-major over ne[3], ne[2], ne[1], ne[0] (ne[0]
  // fastest: ggml's column-major order read as C order of the reversed shape). Views and permuted
  // tensors are read through their strides nb[].
  std::vector<double> values(const abi::TensorHead* t) const;

 private:
  void* sym(void* h, const char* name, const char* lib);
  void check_tensor_layout();
  void choose_context_layout();

  std::string dir_, version_;
  void *h_base_ = nullptr, *h_ggml_ = nullptr, *h_llama_ = nullptr;
  const abi::ContextLayout* layout_ = nullptr;

  // ggml-base
  const char* (*ggml_get_name_)(const abi::TensorHead*) = nullptr;
  const char* (*ggml_op_desc_)(const abi::TensorHead*) = nullptr;
  size_t (*ggml_nbytes_)(const abi::TensorHead*) = nullptr;
  void (*ggml_backend_tensor_get_)(const abi::TensorHead*, void*, size_t, size_t) = nullptr;
  void* (*ggml_init_)(abi::InitParams) = nullptr;
  void (*ggml_free_)(void*) = nullptr;
  abi::TensorHead* (*ggml_new_tensor_2d_)(void*, int32_t, int64_t, int64_t) = nullptr;
  abi::TensorHead* (*ggml_add_)(void*, abi::TensorHead*, abi::TensorHead*) = nullptr;
  abi::TensorHead* (*ggml_permute_)(void*, abi::TensorHead*, int, int, int, int) = nullptr;
  abi::TensorHead* (*ggml_set_name_)(abi::TensorHead*, const char*) = nullptr;
  void* (*ggml_get_data_)(const abi::TensorHead*) = nullptr;
  // llama
  const char* (*llama_version_)() = nullptr;
  void (*llama_backend_init_)() = nullptr;
  void (*llama_log_set_)(abi::LogCallback, void*) = nullptr;
  abi::ParamsBlock (*llama_model_default_params_)() = nullptr;
  abi::ParamsBlock (*llama_context_default_params_)() = nullptr;
  void* (*llama_model_load_from_file_)(const char*, abi::ParamsBlock) = nullptr;
  void* (*llama_init_from_model_)(void*, abi::ParamsBlock) = nullptr;
  int32_t (*llama_decode_)(void*, abi::Batch) = nullptr;
  void (*llama_free_)(void*) = nullptr;
  void (*llama_model_free_)(void*) = nullptr;
};

}  // namespace mlaconf::llamacpp
