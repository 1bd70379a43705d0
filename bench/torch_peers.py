#!/usr/bin/env python3
"""The torch peers of bench/kernel_bench.cu: the same shapes, byte and FLOP models, rotation over more
than 200 MB of inputs, median of many timed calls. Each peer call is captured once per input set in a
CUDA graph and timed by replaying the graphs between CUDA events (torch's best case: no Python or
launch overhead). Writes the same JSON as kernel_bench (rows with the same names), for
bench/merge_bench.py.

    python3 bench/torch_peers.py --json OUT.json [--reps N] [--only SUBSTRING]
"""
import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F

from atomic_write import write_atomic


def timed(fns, reps):
    """Median microseconds per call of fns[i % len(fns)]() (each a graph replay)."""
    for f in fns[:3]:
        f()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    ev[0].record()
    for i in range(reps):
        fns[(i + 3) % len(fns)]()
        ev[i + 1].record()
    ev[-1].synchronize()
    return statistics.median(ev[i].elapsed_time(ev[i + 1]) * 1e3 for i in range(reps))


def graph(fn):
    """Capture fn() (after a warm-up on a side stream) and return the replay function."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


class Bench:
    def __init__(self, reps, only):
        self.reps, self.only, self.rows = reps, only, []
        self.copy_gbs = self.tflops = 0.0

    def wanted(self, name):
        return self.only is None or self.only in name

    def report(self, name, kernel, note, us, nbytes, flops):
        gbs, tfl = nbytes / (us * 1e3), flops / (us * 1e6)
        pct = 100.0 * nbytes / (self.copy_gbs * 1e3) / us if self.copy_gbs else 0.0
        print(f"{name:<52} {us:10.2f} us {gbs:9.1f} GB/s {tfl:8.2f} TFLOP/s {pct:5.1f}% of floor  {note}", flush=True)
        self.rows.append(dict(name=name, kernel=kernel, note=note, us=us, bytes=nbytes, flops=flops, gbs=gbs, tflops=tfl,
                              pct_floor=pct))

    def ceilings(self):
        n = 1 << 30
        a = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
        b = torch.empty_like(a)
        us = timed([lambda: b.copy_(a)], 20)
        self.copy_gbs = 2.0 * n / (us * 1e3)
        self.report("copy_bandwidth(1GiB d2d)", "tensor.copy_", "read + write counted", us, 2.0 * n, 0)
        N = 8192
        x = torch.randn(N, N, dtype=torch.float16, device="cuda")
        w = torch.randn(N, N, dtype=torch.float16, device="cuda")
        us = timed([lambda: torch.mm(x, w)], 10)
        self.tflops = 2.0 * N ** 3 / (us * 1e6)
        self.report("fp16_matmul_rate(8192^3, fp32 acc, cuBLAS)", "torch.mm", "random data", us, 3.0 * N * N * 2, 2.0 * N ** 3)

    # gather + bmm + softmax + bmm over B queries, each over 2048 rows of its own region of one cache.
    def sparse_mla(self, B, ctx=32768):
        H, dqk, dv, topk = 64, 576, 512, 2048
        name = f"sparse_mla_decode(B={B},h=64,d=576,dv=512,topk=2048,ctx={ctx})"
        if not self.wanted(name):
            return
        call_bytes = B * (topk * dqk * 2.0 + H * dqk * 2.0 + topk * 4.0 + H * dv * 4.0)
        n_sets = max(2, math.ceil(200e6 / call_bytes))
        regions = n_sets * B
        cache = torch.randn(regions * ctx, dqk, dtype=torch.float16, device="cuda")
        scale = 1.0 / math.sqrt(192.0)
        sets = []
        for s in range(n_sets):
            q = torch.randn(B, H, dqk, dtype=torch.float16, device="cuda")
            rows = torch.rand(B, ctx, device="cuda").argsort(dim=1)[:, :topk]
            idx = rows + (torch.arange(B, device="cuda")[:, None] + s * B) * ctx
            sets.append((q, idx))

        def peer(q, idx):
            kv = cache[idx]                                               # [B, topk, 576]
            sc = torch.bmm(q, kv.transpose(1, 2)) * scale                 # [B, 64, topk]
            p = torch.softmax(sc.float(), dim=-1).to(torch.float16)
            return torch.bmm(p, kv[..., :dv])                             # [B, 64, 512]

        fns = [graph(lambda q=q, idx=idx: peer(q, idx)) for q, idx in sets]
        us = timed(fns, self.reps)
        self.report(name, "gather+bmm+softmax+bmm", f"rotating {n_sets} sets", us, call_bytes,
                    B * topk * H * (dqk + dv) * 2.0)
        del cache, sets, fns
        torch.cuda.empty_cache()

    # bmm + relu + weighted sum + topk, one query per sequence, B sequences in one batch.
    def indexer(self, B, L, f16):
        Hi, Di, topk = 32, 128, 2048
        dt = torch.float16 if f16 else torch.float32
        esz = 2 if f16 else 4
        keys = "f16" if f16 else "f32"
        name = f"indexer(B={B},hi=32,di=128,topk=2048,L={L},keys={keys})"
        if not self.wanted(name):
            return
        key_bytes = L * Di * esz
        n_sets = max(2, math.ceil(200e6 / (B * key_bytes)))
        sets = []
        for _ in range(n_sets):
            k = torch.rand(B, L, Di, device="cuda").mul_(2).sub_(1).to(dt)
            q = torch.rand(B, Hi, Di, device="cuda").mul_(2).sub_(1).to(dt)
            w = torch.rand(B, Hi, device="cuda") * 0.2
            sets.append((k, q, w))

        def scores(k, q, w):
            s = torch.bmm(k, q.transpose(1, 2))                           # [B, L, Hi]
            return (torch.relu(s.float()) * w[:, None, :]).sum(-1)        # [B, L]

        def full(k, q, w):
            return torch.topk(scores(k, q, w), topk, dim=-1).indices

        flops = B * L * Hi * Di * 2.0
        nbytes = B * (key_bytes + Hi * Di * esz + Hi * 4.0 + topk * 4.0)
        note = f"rotating {n_sets} key sets"
        fns = [graph(lambda a=a: full(*a)) for a in sets]
        self.report(name, "bmm+relu+wsum+topk", note, timed(fns, self.reps), nbytes, flops)
        fns = [graph(lambda a=a: scores(*a)) for a in sets]
        self.report("indexer_scores" + name[7:], "bmm+relu+wsum", note + "; bytes: keys + scores written",
                    timed(fns, self.reps), nbytes + B * L * 4.0, flops)
        sc = [scores(*a) for a in sets]
        fns = [graph(lambda s=s: torch.topk(s, topk, dim=-1)) for s in sc]
        self.report("indexer_topk" + name[7:], "torch.topk", "bytes: scores read once", timed(fns, self.reps),
                    B * (L * 4.0 + topk * 4.0), 0)
        del sets, fns, sc
        torch.cuda.empty_cache()

    # fp16 weights (3.5x the bytes of Q4_K): F.linear for one matrix, bmm for 8 experts.
    def gemv(self):
        rows, cols = 2048, 6144
        mat = rows * cols * 2.0
        pool = max(16, math.ceil(220e6 / mat))
        pool = (pool + 7) // 8 * 8
        W = torch.randn(pool, rows, cols, dtype=torch.float16, device="cuda")
        x = torch.randn(8, cols, 1, dtype=torch.float16, device="cuda")
        n1 = "gemv(type=Q4_K,rows=2048,cols=6144)"
        if self.wanted(n1):
            fns = [graph(lambda i=i: F.linear(x[0, :, 0][None], W[i])) for i in range(pool)]
            self.report(n1, "F.linear fp16", f"fp16 weights, rotating {pool}", timed(fns, self.reps),
                        mat + cols * 2.0 + rows * 2.0, 2.0 * rows * cols)
        n8 = "gemv_experts(type=Q4_K,experts=8,rows=2048,cols=6144)"
        if self.wanted(n8):
            fns = [graph(lambda i=i: torch.bmm(W[8 * i:8 * i + 8], x)) for i in range(pool // 8)]
            self.report(n8, "bmm fp16", f"fp16 weights, 8 contiguous of {pool}", timed(fns, self.reps),
                        8 * mat + 8 * cols * 2.0 + 8 * rows * 2.0, 8 * 2.0 * rows * cols)
        del W
        torch.cuda.empty_cache()

    # One peer over a pool of random input sets of `shape` (together more than 220 MB, so that L2 holds none
    # of them at its turn), call(set) captured per set: the report's bytes are one set plus extra_bytes; note
    # may name the pool's size as {pool}.
    def rotating(self, name, kernel, note, shape, dtype, call, extra_bytes, flops):
        set_bytes = float(math.prod(shape) * torch.tensor([], dtype=dtype).element_size())
        pool = max(1, math.ceil(220e6 / set_bytes))
        X = torch.randn(pool, *shape, dtype=dtype, device="cuda")
        fns = [graph(lambda i=i: call(X[i])) for i in range(pool)]
        self.report(name, kernel, note.format(pool=pool), timed(fns, self.reps), set_bytes + extra_bytes, flops)
        del X, fns
        torch.cuda.empty_cache()

    # F.linear on a rotating pool of rows x cols weights of dtype (fp16 or fp32), B x vectors at once; the bytes are
    # the peer's own format.
    def linear(self, name, rows, cols, B, dtype):
        if not self.wanted(name):
            return
        x = torch.randn(B, cols, dtype=dtype, device="cuda")
        tag = "fp16" if dtype == torch.float16 else "fp32"
        self.rotating(name, f"F.linear {tag}", f"{tag} weights, rotating {{pool}}, {B} x", (rows, cols), dtype,
                      lambda w: F.linear(x, w), B * (cols + rows) * x.element_size(), 2.0 * rows * cols * B)

    # The block-type GEMV cases of kernel_bench (gemv_blocks.cu), and its server's batches (16, 32 and 64 x on the
    # head and attn_output, Q6_K, and on q_b, the dense FFN's gate / up and kv_a, Q4_K): F.linear on fp16 weights of
    # the same shape, B x vectors at once (fp16 bytes: the peer reads its own format).
    def gemv_blocks(self):
        cases = [(B, t, rows, cols) for B in (1, 8) for t, rows, cols in (
            ("Q6_K", 154880, 6144), ("Q6_K", 16384, 6144), ("Q6_K", 6144, 16384), ("Q8_0", 6144, 16384), ("Q5_K", 6144, 16384))]
        cases += [(B, t, rows, cols) for B in (16, 32, 64) for t, rows, cols in (
            ("Q6_K", 154880, 6144), ("Q6_K", 6144, 16384), ("Q4_K", 16384, 2048), ("Q4_K", 12288, 6144), ("Q4_K", 576, 6144))]
        for B, t, rows, cols in cases:
            self.linear(f"gemv(type={t},rows={rows},cols={cols},b={B})", rows, cols, B, torch.float16)

    # The per-head cases of kernel_bench (gemv_per_head: 64 heads, T tokens, entry t H + h on head h): one fp16 bmm of
    # the 64 heads' matrices [64, rows, cols] with their T x each [64, cols, T].
    def gemv_per_head(self):
        H = 64
        for t, rows, cols, tokens in (("Q5_0", 512, 192, (1, 8)), ("Q6_K", 256, 512, (1, 8)), ("Q4_K", 256, 512, (1, 8, 64))):
            for T in tokens:
                name = f"gemv_per_head(type={t},rows={rows},cols={cols},heads={H},t={T})"
                if not self.wanted(name):
                    continue
                x = torch.randn(H, cols, T, dtype=torch.float16, device="cuda")
                self.rotating(name, "bmm fp16", f"fp16 weights, rotating {{pool}} head sets, {T} x per head", (H, rows, cols),
                              torch.float16, lambda w: torch.bmm(w, x), H * T * (cols + rows) * 2.0, 2.0 * rows * cols * H * T)

    # The float GEMV case of kernel_bench (gemv_float.cu): the F32 router 256 x 6144, F.linear in fp32
    # (TF32 off) on the same bytes, B x vectors at once.
    def gemv_float(self):
        rows, cols = 256, 6144
        for B in (1, 8):
            self.linear(f"gemv(type=F32,rows={rows},cols={cols},b={B})", rows, cols, B, torch.float32)

    # The greedy pick of kernel_bench (argmax_rows): B rows of the vocabulary's 154880 fp32 logits,
    # torch.argmax over each row (its first index of the maximum, as argmax_rows').
    def argmax(self):
        n = 154880
        for B in (1, 64):
            name = f"argmax_rows(B={B},n={n})"
            if self.wanted(name):
                self.rotating(name, "torch.argmax", "rotating {pool} logit sets", (B, n), torch.float32,
                              lambda s: torch.argmax(s, dim=1), B * 8.0, 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--only")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_peers: not supported: no CUDA device", file=sys.stderr)
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False
    b = Bench(a.reps, a.only)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    b.ceilings()
    for B in (1, 8, 32, 64):
        b.sparse_mla(B)
    b.indexer(1, 131072, True)
    b.indexer(1, 131072, False)
    b.indexer(16, 131072, True)
    b.gemv()
    b.gemv_blocks()
    b.gemv_per_head()
    b.gemv_float()
    b.argmax()
    write_atomic(a.json, json.dumps(dict(source="torch", device=torch.cuda.get_device_name(), torch=torch.__version__,
                                         copy_gbs=b.copy_gbs, fp16_tflops=b.tflops, rows=b.rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
