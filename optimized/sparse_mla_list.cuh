// mlaconf optimized: what the two sparse MLA launchers share (sparse_mla.cu: the dispatch and the tensor-core
// kernel for d_qk = 576, d_v = 512; sparse_mla_simt.cu: the SIMT kernel for other head sizes): the query's list,
// its split and the fp32 partials of the splits, packed by one function so that they cannot differ.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "optimized/api.h"
#include "optimized/common.cuh"

namespace mlaconf::cuda::mla {

constexpr int kMaxDqk = 1024;
constexpr int kMaxDv = 512;  // the SIMT kernel's: 2 output columns per thread of 256

// What both kernels take from SparseMlaArgs: the query's list, its split, and the fp32 partials of the
// splits (filled by list_params, so that the two launchers cannot pack them differently).
struct ListParams {
  const __half* q;       // [T, H, dqk]
  const __half* cache;   // [L, dqk]
  int64_t L;
  const int32_t* idx;    // [T, top_k]
  const int32_t* q_pos;  // [T] or null (dense fault only)
  const int32_t* row_base;  // [T] or null (dense fault only)
  int T, H, top_k;
  int entries;           // list length per query (top_k, or L for the dense fault)
  int split;             // entries per split (a multiple of the kernel's tile rows)
  int n_splits;
  bool dense;
  float scale_log2;      // scale * log2(e)
  float* o_part;         // [T, n_splits, H, dv]
  float* m_part;         // [T, n_splits, H]
  float* l_part;         // [T, n_splits, H]
};

// partials: allocate the split partials (scratch slots 0-2) for d_v values per head.
inline ListParams list_params(const SparseMlaArgs& a, bool dense, int64_t entries, int64_t split, int64_t n_splits, bool partials,
                       int64_t d_v) {
  ListParams p{};
  p.q = reinterpret_cast<const __half*>(a.q);
  p.cache = reinterpret_cast<const __half*>(a.cache);
  p.L = a.L;
  p.idx = a.idx;
  p.q_pos = a.q_pos;
  p.row_base = a.row_base;
  p.T = (int)a.T;
  p.H = (int)a.H;
  p.top_k = (int)a.top_k;
  p.entries = (int)entries;
  p.split = (int)split;
  p.n_splits = (int)n_splits;
  p.dense = dense;
  p.scale_log2 = a.scale * 1.4426950408889634f;
  if (partials) {
    const size_t n_part = (size_t)a.T * n_splits * a.H;
    p.o_part = static_cast<float*>(scratch(0, n_part * d_v * 4));
    p.m_part = static_cast<float*>(scratch(1, n_part * 4));
    p.l_part = static_cast<float*>(scratch(2, n_part * 4));
  }
  return p;
}

// The SIMT kernel (sparse_mla_simt.cu) for any even d_qk <= kMaxDqk and d_v <= kMaxDv: its split, launch and merge.
void sparse_mla_simt(const SparseMlaArgs& a, bool dense, int64_t entries);

}  // namespace mlaconf::cuda::mla
