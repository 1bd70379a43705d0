// mlaconf <-> llama.cpp: loading and checking the libraries (see library.h, abi.h).
#include "tools/llama_cpp/library.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace mlaconf::llamacpp {
namespace {

#if !(defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__)))
#define MLACONF_LLAMA_ABI_UNSUPPORTED 1
#endif

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// stdout of a shell command (trailing newline dropped); "" when it fails.
std::string command_output(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  if (!p) return "";
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p.get())) out.append(buf, n);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

// The python3 asked for the llama_cpp package: the given one (MLACONF_PYTHON, tools/settings.h), else the
// Debian one, else the PATH's.
std::string python3(const std::string& given) {
  if (!given.empty()) return given;
  if (is_file("/usr/bin/python3")) return "/usr/bin/python3";
  return "python3";
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

bool silent_log = true;
void log_sink(int, const char* text, void*) {
  if (!silent_log) std::fputs(text, stderr);
}

}  // namespace

std::string find_library_dir(const std::string& dir, const std::string& python) {
  if (!dir.empty()) {
    if (!is_file(dir + "/libllama.so")) throw InputError("--llama-lib " + dir + ": no libllama.so in it");
    return dir;
  }
  // The package's folder without importing it (an import would load the libraries into python).
  const std::string cmd = shell_quote(python3(python)) +
                          " -c 'import importlib.util as u; s = u.find_spec(\"llama_cpp\"); "
                          "print(s.submodule_search_locations[0] if s and s.submodule_search_locations else \"\")' 2>/dev/null";
  const std::string pkg = command_output(cmd);
  if (pkg.empty()) throw NotSupported("llama_cpp not installed (no --llama-lib, and " + python3(python) + " finds no llama_cpp package)");
  for (const char* sub : {"/lib", ""})
    if (is_file(pkg + sub + "/libllama.so")) return pkg + sub;
  throw NotSupported("llama_cpp package at " + pkg + " holds no libllama.so (in lib/ or beside it)");
}

void* Library::sym(void* h, const char* name, const char* lib) {
  void* p = ::dlsym(h, name);
  if (!p) throw NotSupported("llama.cpp at " + dir_ + ": " + lib + " lacks " + name + " (an unsupported llama.cpp release)");
  return p;
}

Library::Library(const std::string& dir, bool log) : dir_(dir) {
#ifdef MLACONF_LLAMA_ABI_UNSUPPORTED
  throw NotSupported("--backend llama.cpp: only x86-64 and AArch64 Linux (the by-value struct ABI of tools/llama_cpp/abi.h)");
#endif
  auto open = [&](const char* file) {
    const std::string p = dir_ + "/" + file;
    void* h = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = ::dlerror();
      throw NotSupported("cannot load " + p + ": " + (e ? e : "dlopen failed"));
    }
    return h;
  };
  h_base_ = open("libggml-base.so");
  h_ggml_ = open("libggml.so");
  h_llama_ = open("libllama.so");
  auto B = [&](auto& f, const char* n) { f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(sym(h_base_, n, "libggml-base")); };
  auto L = [&](auto& f, const char* n) { f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(sym(h_llama_, n, "libllama")); };
  B(ggml_get_name_, "ggml_get_name");
  B(ggml_op_desc_, "ggml_op_desc");
  B(ggml_nbytes_, "ggml_nbytes");
  B(ggml_backend_tensor_get_, "ggml_backend_tensor_get");
  B(ggml_init_, "ggml_init");
  B(ggml_free_, "ggml_free");
  B(ggml_new_tensor_2d_, "ggml_new_tensor_2d");
  B(ggml_add_, "ggml_add");
  B(ggml_permute_, "ggml_permute");
  B(ggml_set_name_, "ggml_set_name");
  B(ggml_get_data_, "ggml_get_data");
  llama_version_ = reinterpret_cast<const char* (*)()>(::dlsym(h_llama_, "llama_version"));  // absent before 2026
  L(llama_backend_init_, "llama_backend_init");
  L(llama_log_set_, "llama_log_set");
  L(llama_model_default_params_, "llama_model_default_params");
  L(llama_context_default_params_, "llama_context_default_params");
  L(llama_model_load_from_file_, "llama_model_load_from_file");
  L(llama_init_from_model_, "llama_init_from_model");
  L(llama_decode_, "llama_decode");
  L(llama_free_, "llama_free");
  L(llama_model_free_, "llama_model_free");
  version_ = llama_version_ ? llama_version_() : "(no llama_version)";
  {
    const char* (*gv)() = reinterpret_cast<const char* (*)()>(::dlsym(h_base_, "ggml_version"));
    const char* (*gc)() = reinterpret_cast<const char* (*)()>(::dlsym(h_base_, "ggml_commit"));
    if (gv && gc) version_ += std::string(" (ggml ") + gv() + ", commit " + gc() + ")";
  }
  silent_log = !log;
  llama_log_set_(log_sink, nullptr);
  check_tensor_layout();
  choose_context_layout();
  llama_backend_init_();
}

Library::~Library() {
  // The libraries stay loaded: ggml keeps global state (thread pools) that must not outlive its code.
}

// A probe graph read back through abi::TensorHead: a 3 x 5 F32 tensor, its sum with another and its
// transpose. Any mismatch means this ggml's struct ggml_tensor is not the one abi.h declares.
void Library::check_tensor_layout() {
  abi::InitParams ip{1 << 20, nullptr, false};
  void* ctx = ggml_init_(ip);
  if (!ctx) throw NotSupported("llama.cpp at " + dir_ + ": ggml_init failed");
  struct Free {
    Library* l;
    void* c;
    ~Free() { l->ggml_free_(c); }
  } guard{this, ctx};
  auto fail = [&](const std::string& what) {
    throw NotSupported("llama.cpp " + version_ + " at " + dir_ + ": struct ggml_tensor is not the layout mlaconf knows (" + what + ")");
  };
  abi::TensorHead* a = ggml_new_tensor_2d_(ctx, abi::kTypeF32, 3, 5);
  abi::TensorHead* b = ggml_new_tensor_2d_(ctx, abi::kTypeF32, 3, 5);
  if (!a || !b) fail("ggml_new_tensor_2d returned null");
  if (a->type != abi::kTypeF32 || a->ne[0] != 3 || a->ne[1] != 5 || a->ne[2] != 1 || a->ne[3] != 1) fail("type / ne");
  if (a->nb[0] != 4 || a->nb[1] != 12 || a->nb[2] != 60 || a->nb[3] != 60) fail("nb");
  ggml_set_name_(a, "mlaconf_probe");
  if (name(a) != "mlaconf_probe") fail("name");
  abi::TensorHead* c = ggml_add_(ctx, a, b);
  if (!c || c->src[0] != a || c->src[1] != b || op(c) != "ADD") fail("src[] / op of ggml_add");
  abi::TensorHead* p = ggml_permute_(ctx, a, 1, 0, 2, 3);
  if (!p || p->ne[0] != 5 || p->ne[1] != 3 || p->nb[0] != 12 || p->nb[1] != 4 || p->src[0] != a) fail("ggml_permute view");
  float* d = static_cast<float*>(ggml_get_data_(a));
  for (int i = 0; i < 15; ++i) d[i] = static_cast<float>(i);
  const std::vector<double> v = values(p);  // [3][5] row-major: v[i * 5 + j] = a[j][i] = j * 3 + i
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      if (v[i * 5 + j] != j * 3 + i) fail("strided read of a permuted view");
}

void Library::choose_context_layout() {
  const abi::ParamsBlock d = llama_context_default_params_();
  auto u32 = [&](size_t off) { uint32_t v; std::memcpy(&v, d.bytes + off, 4); return v; };
  auto i32 = [&](size_t off) { int32_t v; std::memcpy(&v, d.bytes + off, 4); return v; };
  auto f32 = [&](size_t off) { float v; std::memcpy(&v, d.bytes + off, 4); return v; };
  auto ptr = [&](size_t off) { void* v; std::memcpy(&v, d.bytes + off, sizeof v); return v; };
  for (const abi::ContextLayout& l : abi::kContextLayouts) {
    bool ok = u32(l.n_ctx) == 512 && u32(l.n_batch) == 2048 && u32(l.n_ubatch) == 512 && u32(l.n_seq_max) == 1 &&
              i32(l.flash_attn_type) == -1 && f32(l.yarn_ext_factor) == -1.0f && ptr(l.cb_eval) == nullptr &&
              ptr(l.cb_eval_user_data) == nullptr && i32(l.type_k) == abi::kTypeF16 && i32(l.type_v) == abi::kTypeF16 &&
              d.bytes[l.offload_kqv] == 1 && d.bytes[l.no_perf] <= 1;
    if (l.n_outputs_max >= 0) ok = ok && u32(static_cast<size_t>(l.n_outputs_max)) == 0;
    if (ok) {
      layout_ = &l;
      return;
    }
  }
  throw NotSupported("llama.cpp " + version_ + " at " + dir_ +
                     ": llama_context_params is none of the layouts mlaconf knows (docs/LLAMA_CPP.md lists the supported releases)");
}

struct Library::Session {
  void* model = nullptr;
  void* ctx = nullptr;
};

Library::Session* Library::open(const std::string& gguf, uint32_t n_ctx, uint32_t n_batch, int threads, int flash_attn,
                                abi::EvalCallback cb, void* user) {
  auto s = std::make_unique<Session>();
  s->model = llama_model_load_from_file_(gguf.c_str(), llama_model_default_params_());
  if (!s->model) throw NotSupported("llama.cpp " + version_ + " could not load " + gguf + " (MLACONF_LLAMA_LOG=1 shows why)");
  abi::ParamsBlock p = llama_context_default_params_();
  const abi::ContextLayout& l = *layout_;
  auto put = [&](size_t off, auto v) { std::memcpy(p.bytes + off, &v, sizeof v); };
  put(l.n_ctx, n_ctx);
  put(l.n_batch, n_batch);
  put(l.n_ubatch, n_batch);  // one ubatch per pass: the callback sees every row of a pass at once
  put(l.n_seq_max, uint32_t{1});
  if (l.n_outputs_max >= 0) put(static_cast<size_t>(l.n_outputs_max), uint32_t{0});
  if (l.n_outputs_max_per_seq >= 0) put(static_cast<size_t>(l.n_outputs_max_per_seq), uint32_t{0});  // every row's logits
  put(l.n_threads, int32_t{threads});
  put(l.n_threads_batch, int32_t{threads});
  put(l.flash_attn_type, int32_t{flash_attn});
  put(l.cb_eval, cb);
  put(l.cb_eval_user_data, user);
  s->ctx = llama_init_from_model_(s->model, p);
  if (!s->ctx) {
    llama_model_free_(s->model);
    throw NotSupported("llama.cpp " + version_ + " could not create a context for " + gguf + " (MLACONF_LLAMA_LOG=1 shows why)");
  }
  return s.release();
}

void Library::decode(Session* s, const std::vector<int32_t>& ids, int32_t pos0) {
  const size_t n = ids.size();
  std::vector<int32_t> tok(ids), pos(n), nseq(n, 1);
  std::vector<int32_t> seq0(n, 0);
  std::vector<int32_t*> seq(n);
  std::vector<int8_t> logits(n, 1);
  for (size_t i = 0; i < n; ++i) {
    pos[i] = pos0 + static_cast<int32_t>(i);
    seq[i] = &seq0[i];
  }
  abi::Batch b{static_cast<int32_t>(n), tok.data(), nullptr, pos.data(), nseq.data(), seq.data(), logits.data()};
  const int32_t rc = llama_decode_(s->ctx, b);
  if (rc != 0) throw NotSupported("llama.cpp " + version_ + ": llama_decode returned " + std::to_string(rc) + " (MLACONF_LLAMA_LOG=1 shows why)");
}

void Library::close(Session* s) {
  if (!s) return;
  if (s->ctx) llama_free_(s->ctx);
  if (s->model) llama_model_free_(s->model);
  delete s;
}

std::string Library::name(const abi::TensorHead* t) const { return ggml_get_name_(t); }
std::string Library::op(const abi::TensorHead* t) const { return ggml_op_desc_(t); }

std::vector<double> Library::values(const abi::TensorHead* t) const {
  size_t esz = t->type == abi::kTypeF32 || t->type == abi::kTypeI32 ? 4 : t->type == abi::kTypeF16 ? 2 : 0;
  if (!esz) throw NotSupported("llama.cpp tensor " + name(t) + " has ggml type " + std::to_string(t->type) + " (mlaconf reads F32, F16, I32)");
  const size_t bytes = ggml_nbytes_(t);
  std::vector<unsigned char> raw(bytes);
  if (t->buffer)
    ggml_backend_tensor_get_(t, raw.data(), 0, bytes);
  else
    std::memcpy(raw.data(), ggml_get_data_(t), bytes);
  const int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
  std::vector<double> v(static_cast<size_t>(n));
  size_t k = 0;
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
          const size_t off = i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
          const unsigned char* e = raw.data() + off;
          if (t->type == abi::kTypeF32) {
            float f;
            std::memcpy(&f, e, 4);
            v[k++] = f;
          } else if (t->type == abi::kTypeI32) {
            int32_t i;
            std::memcpy(&i, e, 4);
            v[k++] = i;
          } else {
            uint16_t h;
            std::memcpy(&h, e, 2);
            v[k++] = half_to_float(h);
          }
        }
  return v;
}

}  // namespace mlaconf::llamacpp
