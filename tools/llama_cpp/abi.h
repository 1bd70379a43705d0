// mlaconf <-> llama.cpp: the few declarations of llama.cpp's and ggml's C ABI that `answer --backend
// llama.cpp` calls, written here so that mlaconf needs no llama.cpp at build time (the libraries are
// dlopen'ed at run time: tools/llama_cpp/library.h).
//
// Nothing here is trusted blindly. library.cpp checks each assumption against the loaded library before
// the first model is loaded, and refuses (NotSupported, exit 3) when one does not hold:
//   - TensorHead (the leading fields of `struct ggml_tensor`, and its src[] array): a probe graph built
//     with the library's own ggml_new_tensor_2d / ggml_add must read back through it as expected.
//   - llama_context_params: known layouts only (kContextLayouts), chosen by the library's
//     llama_context_default_params() matching that layout's fingerprint of default values.
//   - llama_model_params / llama_context_params are received and passed by value as an oversized opaque
//     block (ParamsBlock). On x86-64 System V and AArch64 a struct larger than 16 bytes is returned
//     through a caller-provided buffer and passed in caller-owned memory, so a larger block than the real
//     struct is read and written correctly; other targets are refused.
//   - llama_batch: seven fields, unchanged since 2023 (Batch).
#pragma once
#include <cstddef>
#include <cstdint>

namespace mlaconf::llamacpp::abi {

// ggml_type ids used here (they are GGUF file-format ids: fixed).
inline constexpr int32_t kTypeF32 = 0;
inline constexpr int32_t kTypeF16 = 1;
inline constexpr int32_t kTypeI32 = 26;

// The leading fields of struct ggml_tensor (ggml.h): type, buffer, ne[4] (elements, ne[0] fastest),
// nb[4] (byte strides), op, op_params[16], flags, src[kMaxSrc].
inline constexpr int kMaxDims = 4;
inline constexpr int kMaxSrc = 10;
struct TensorHead {
  int32_t type;
  void* buffer;
  int64_t ne[kMaxDims];
  size_t nb[kMaxDims];
  int32_t op;
  int32_t op_params[16];
  int32_t flags;
  const TensorHead* src[kMaxSrc];
};

// struct llama_batch (llama.h).
struct Batch {
  int32_t n_tokens;
  int32_t* token;
  float* embd;
  int32_t* pos;
  int32_t* n_seq_id;
  int32_t** seq_id;
  int8_t* logits;
};

// struct ggml_init_params (ggml.h), passed by value to ggml_init.
struct InitParams {
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};

// llama_model_params / llama_context_params, held as bytes (see above). 160 bytes in the tested
// release; the block is far larger so that a grown struct is still received whole.
struct alignas(16) ParamsBlock {
  unsigned char bytes[4096];
};

// ggml_backend_sched_eval_callback: asked (ask = true) before a node is computed whether the caller
// wants to see it; called again (ask = false) once it is computed. Returning false from the second call
// aborts the graph.
using EvalCallback = bool (*)(const TensorHead* t, bool ask, void* user);
using LogCallback = void (*)(int level, const char* text, void* user);

// Byte offsets of the llama_context_params fields mlaconf sets, and the defaults that identify the
// layout (llama_context_default_params() must return exactly these at these offsets).
struct ContextLayout {
  const char* name;      // the llama.cpp / llama-cpp-python releases it was read from
  size_t size;           // sizeof(llama_context_params)
  size_t n_ctx, n_batch, n_ubatch, n_seq_max;  // uint32
  long n_outputs_max, n_outputs_max_per_seq;   // uint32, -1 = no such field
  size_t n_threads, n_threads_batch;           // int32
  size_t flash_attn_type;                      // enum (int32): -1 auto, 0 off, 1 on
  size_t yarn_ext_factor;                      // float, default -1
  size_t cb_eval, cb_eval_user_data;           // pointers
  size_t type_k, type_v;                       // enum ggml_type (int32), default F16
  size_t offload_kqv, no_perf;                 // bool
};

// Every layout mlaconf knows; docs/LLAMA_CPP.md lists the releases each one was checked against.
inline constexpr ContextLayout kContextLayouts[] = {
    // llama.cpp of llama-cpp-python 0.3.36 (llama.cpp 0c1e570, 2026-10): n_rs_seq, n_outputs_max,
    // n_outputs_max_per_seq and ctx_type between n_seq_max and the rope fields.
    {"llama.cpp 2026-10 (llama-cpp-python 0.3.36)", 160, 0, 4, 8, 12, 20, 24, 28, 32, 52, 64, 88, 96, 104, 108, 129, 130},
    // llama-cpp-python 0.3.34 (ggml 0.16.0): no n_outputs_max_per_seq, so the rest sits 4 bytes earlier
    // up to the callback (read off the package's own ctypes declaration of the struct).
    {"llama-cpp-python 0.3.34 (ggml 0.16.0)", 160, 0, 4, 8, 12, 20, -1, 24, 28, 48, 60, 88, 96, 104, 108, 129, 130},
};

}  // namespace mlaconf::llamacpp::abi
