// mlaconf optimized: sparse MLA in the absorbed form for any head size (the SIMT kernel; GLM-5's 576 / 512 run
// the tensor-core kernel of sparse_mla.cu).
//
// One latent cache row (d_qk f16: [c | k_pe]) serves every head (MQA), so a CTA takes kHeads heads
// of one query and one split of its index list: it gathers kRows listed rows at a time into shared
// memory (64-bit row offsets), scores them against its heads' queries, keeps an online softmax per
// head (base-2 exponent) and accumulates the first d_v values of each row. Each split writes its
// unnormalised partial output with its running max and sum; a second kernel merges the splits with
// the log-sum-exp rule. Index -1 is "no token"; a head with no valid token ends with zeros.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/faults.h"
#include "optimized/sparse_mla_list.cuh"

namespace mlaconf::cuda::mla {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kHeads = 16;           // heads per CTA (2 per warp in the score phase)
constexpr int kRows = 32;            // listed rows per step (one per lane in the score phase)
static_assert(kMaxDv == 2 * kThreads, "each thread owns 2 output columns");

struct Params : ListParams {
  int dqk, dv;
};

__global__ void __launch_bounds__(kThreads) sparse_mla_partial(Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int ldk = p.dqk + 2;  // halves per shared row: an odd number of 4-byte words, no bank conflicts
  __half* q_s = reinterpret_cast<__half*>(smem);          // [kHeads][ldk]
  __half* k_s = q_s + kHeads * ldk;                        // [kRows][ldk]
  float* p_s = reinterpret_cast<float*>(k_s + kRows * ldk);  // [kHeads][kRows]
  float* m_s = p_s + kHeads * kRows;                        // [kHeads] running max (log2 domain)
  float* l_s = m_s + kHeads;                                // [kHeads] running sum
  float* a_s = l_s + kHeads;                                // [kHeads] rescale of this step
  int64_t* row_s = reinterpret_cast<int64_t*>(a_s + kHeads);  // [kRows] row of each slot, -1 = none

  const int split = blockIdx.x, h0 = blockIdx.y * kHeads, t = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nh = min(kHeads, p.H - h0);
  const int words = p.dqk / 2;  // 4-byte words per row

  // Queries of this CTA's heads.
  for (int i = tid; i < kHeads * words; i += kThreads) {
    const int h = i / words, w = i - h * words;
    uint32_t v = 0;
    if (h < nh) v = reinterpret_cast<const uint32_t*>(p.q + ((int64_t)t * p.H + h0 + h) * p.dqk)[w];
    reinterpret_cast<uint32_t*>(q_s + h * ldk)[w] = v;
  }
  if (tid < kHeads) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
  }
  float acc[kHeads][2];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) acc[h][0] = acc[h][1] = 0.f;
  const int c0 = 2 * tid;  // this thread's two output columns

  const int begin = split * p.split, end = min(begin + p.split, p.entries);
  const int64_t limit = p.dense ? (p.q_pos ? (int64_t)p.q_pos[t] : p.L - 1) : 0;
  const int64_t base = (p.dense && p.row_base) ? (int64_t)p.row_base[t] : 0;
  for (int step = begin; step < end; step += kRows) {
    __syncthreads();  // previous step's k_s / p_s reads are done
    if (tid < kRows) {
      const int e = step + tid;
      int64_t row = -1;
      if (e < end) {
        if (p.dense) {
          row = (e <= limit && base + e < p.L) ? base + e : -1;
        } else {
          const int32_t r = p.idx[(int64_t)t * p.top_k + e];
          row = (r >= 0 && r < p.L) ? r : -1;
        }
      }
      row_s[tid] = row;
    }
    __syncthreads();
    // Gather the listed rows (4-byte loads; a row's words are contiguous in global memory).
    for (int i = tid; i < kRows * words; i += kThreads) {
      const int r = i / words, w = i - r * words;
      const int64_t row = row_s[r];
      uint32_t v = 0;
      if (row >= 0) v = __ldg(reinterpret_cast<const uint32_t*>(p.cache + row * (int64_t)p.dqk) + w);
      reinterpret_cast<uint32_t*>(k_s + r * ldk)[w] = v;
    }
    __syncthreads();
    // Scores: warp w handles heads w and w + kWarps; lane = row. Online softmax per head.
    for (int hh = warp; hh < kHeads; hh += kWarps) {
      float s = -INFINITY;
      if (hh < nh && row_s[lane] >= 0) {
        const __half2* qa = reinterpret_cast<const __half2*>(q_s + hh * ldk);
        const __half2* ka = reinterpret_cast<const __half2*>(k_s + lane * ldk);
        float d0 = 0.f, d1 = 0.f;
        for (int w = 0; w < words; ++w) {
          const float2 qf = __half22float2(qa[w]), kf = __half22float2(ka[w]);
          d0 = fmaf(qf.x, kf.x, d0);
          d1 = fmaf(qf.y, kf.y, d1);
        }
        s = (d0 + d1) * p.scale_log2;
      }
      float mx = s;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = m_s[hh];
      const float m_new = fmaxf(m_old, mx);
      const float pr = (s == -INFINITY) ? 0.f : exp2f(s - m_new);
      float sum = pr;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      p_s[hh * kRows + lane] = pr;
      __syncwarp();
      if (lane == 0) {
        const float alpha = (m_old == -INFINITY) ? 1.f : exp2f(m_old - m_new);
        a_s[hh] = alpha;
        l_s[hh] = l_s[hh] * alpha + sum;
        m_s[hh] = m_new;
      }
    }
    __syncthreads();
    // Accumulate: acc[h][c] = acc[h][c] * alpha[h] + sum_r p[h][r] * k[r][c].
    if (c0 < p.dv) {
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float a = a_s[h];
        acc[h][0] *= a;
        acc[h][1] *= a;
      }
      for (int r = 0; r < kRows; ++r) {
        const float2 kv = __half22float2(*reinterpret_cast<const __half2*>(k_s + r * ldk + c0));
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          const float pr = p_s[h * kRows + r];
          acc[h][0] = fmaf(pr, kv.x, acc[h][0]);
          acc[h][1] = fmaf(pr, kv.y, acc[h][1]);
        }
      }
    }
  }
  __syncthreads();
  const int64_t pbase = ((int64_t)t * p.n_splits + split) * p.H;
  if (c0 < p.dv) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h)
      if (h < nh) *reinterpret_cast<float2*>(p.o_part + (pbase + h0 + h) * p.dv + c0) = make_float2(acc[h][0], acc[h][1]);
  }
  if (tid < nh) {
    p.m_part[pbase + h0 + tid] = m_s[tid];
    p.l_part[pbase + h0 + tid] = l_s[tid];
  }
}

// out[t, h, :] = sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s; zeros when no split saw a token.
__global__ void sparse_mla_merge(const float* o_part, const float* m_part, const float* l_part, int n_splits, int H, int dv,
                                 bool plain_sum, float* out) {
  const int h = blockIdx.x, t = blockIdx.y;
  float M = -INFINITY;
  for (int s = 0; s < n_splits; ++s) M = fmaxf(M, m_part[((int64_t)t * n_splits + s) * H + h]);
  float L = 0.f;
  for (int s = 0; s < n_splits; ++s) {
    const int64_t k = ((int64_t)t * n_splits + s) * H + h;
    const float w = plain_sum ? 1.f : (m_part[k] == -INFINITY ? 0.f : exp2f(m_part[k] - M));
    L += w * l_part[k];
  }
  const float inv = (M == -INFINITY || L == 0.f) ? 0.f : 1.f / L;
  for (int c = threadIdx.x; c < dv; c += blockDim.x) {
    float acc = 0.f;
    for (int s = 0; s < n_splits; ++s) {
      const int64_t k = ((int64_t)t * n_splits + s) * H + h;
      const float w = plain_sum ? 1.f : (m_part[k] == -INFINITY ? 0.f : exp2f(m_part[k] - M));
      if (w != 0.f) acc += w * o_part[k * dv + c];
    }
    out[((int64_t)t * H + h) * dv + c] = acc * inv;
  }
}

}  // namespace

void sparse_mla_simt(const SparseMlaArgs& a, bool dense, int64_t entries) {
  // Automatic split: enough CTAs to fill the device about twice (132 SMs on an H200).
  const int64_t ctas = ((a.H + kHeads - 1) / kHeads) * (a.plan_queries > 0 ? a.plan_queries : a.T);
  int64_t split = a.split > 0 ? a.split : std::max<int64_t>(kRows, (entries + std::max<int64_t>(1, 264 / ctas) - 1) / std::max<int64_t>(1, 264 / ctas));
  split = ((split + kRows - 1) / kRows) * kRows;
  const int n_splits = entries == 0 ? 1 : (int)((entries + split - 1) / split);
  Params p{};
  static_cast<ListParams&>(p) = list_params(a, dense, entries, split, n_splits, true, a.d_v);
  p.dqk = (int)a.d_qk;
  p.dv = (int)a.d_v;
  const int ldk = p.dqk + 2;
  const size_t smem = (size_t)(kHeads + kRows) * ldk * 2 + (kHeads * kRows + 3 * kHeads) * 4 + kRows * 8;
  MLACONF_CUDA_CHECK(cudaFuncSetAttribute(sparse_mla_partial, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  dim3 grid(n_splits, (unsigned)((a.H + kHeads - 1) / kHeads), (unsigned)a.T);
  sparse_mla_partial<<<grid, kThreads, smem, cur_stream()>>>(p);
  MLACONF_CUDA_LAUNCH_CHECK("sparse_mla_partial");
  sparse_mla_merge<<<dim3((unsigned)a.H, (unsigned)a.T), 128, 0, cur_stream()>>>(p.o_part, p.m_part, p.l_part, n_splits, p.H, p.dv,
                                                                 active_fault() == Fault::NoLseMerge, a.out);
  MLACONF_CUDA_LAUNCH_CHECK("sparse_mla_merge");
}

}  // namespace mlaconf::cuda::mla
