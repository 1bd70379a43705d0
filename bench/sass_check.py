#!/usr/bin/env python3
"""Static SASS checks of a CUDA object file, for kernel work without a GPU at hand.

  sass_check.py same A.o B.o [--arch sm_90,sm_120]
      Is every function's SASS the same in A and B (instruction text, addresses and encodings stripped)?
      How a refactor lands without a device run: if the SASS of every function is unchanged, the figures
      measured on A hold for B. Exit 0 when identical, 1 when not (the first differences printed).

  sass_check.py loops OBJ [--arch sm_90] [--function SUBSTRING]
      Per function, every loop (a backward branch) that holds an HMMA: its instructions, the same without
      the byte-copy fallback of a partial tile (the BSSY .. BSYNC regions that load bytes: the count
      docs/perf/gemv-blocks.md gives per version as "the hot loop"), its HMMA and LDGSTS, and the ten
      most frequent opcodes of that fast path.

Needs cuobjdump (CUDA toolkits have it; else NVIDIA's `nvidia-cuda-cuobjdump` wheel): found on PATH, in
$CUDA_HOME/bin or /usr/local/cuda/bin. Exit 2 for bad arguments or a missing tool or file, with one line
saying which.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

INSTR = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNC = re.compile(r"^\s+Function : (\S+)")
BRANCH = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")


def fail(msg):
    print(f"sass_check: {msg}", file=sys.stderr)
    sys.exit(2)


def cuobjdump():
    for d in [None, os.path.join(os.environ.get("CUDA_HOME", ""), "bin"), "/usr/local/cuda/bin"]:
        exe = shutil.which("cuobjdump", path=d)
        if exe:
            return exe
    fail("cuobjdump not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); "
         "`pip download nvidia-cuda-cuobjdump` has it")


def sass(obj, arch):
    """{function name: [(address, instruction text)]} of one architecture's SASS in obj."""
    if not os.path.isfile(obj):
        fail(f"{obj}: no such file")
    r = subprocess.run([cuobjdump(), "-sass", "-arch", arch, obj], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"cuobjdump -sass -arch {arch} {obj}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'failed'}")
    funcs, cur = {}, None
    for line in r.stdout.splitlines():
        m = FUNC.match(line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = INSTR.match(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), re.sub(r"\s+", " ", m.group(2))))
    return funcs


def texts(ins):
    """The instruction texts of a function (cuobjdump numbers each function's addresses from 0, so branch
    targets compare as they are)."""
    return [t for _, t in ins]


def cmd_same(a):
    differ = 0
    for arch in a.arch.split(","):
        fa, fb = sass(a.a, arch), sass(a.b, arch)
        if not fa and not fb:
            fail(f"no {arch} SASS in either file")
        names = sorted(set(fa) | set(fb))
        bad = [n for n in names if n not in fa or n not in fb or texts(fa[n]) != texts(fb[n])]
        print(f"{arch}: {len(names) - len(bad)} of {len(names)} functions identical")
        for n in bad[:5]:
            if n not in fa or n not in fb:
                print(f"  {n}: only in {a.a if n in fa else a.b}")
                continue
            ta, tb = texts(fa[n]), texts(fb[n])
            i = next((k for k in range(min(len(ta), len(tb))) if ta[k] != tb[k]), min(len(ta), len(tb)))
            print(f"  {n}: {len(ta)} vs {len(tb)} instructions, first difference at {i}:")
            print(f"    {ta[i] if i < len(ta) else '(end)'}\n    {tb[i] if i < len(tb) else '(end)'}")
        differ += len(bad)
    return 1 if differ else 0


def opcode(t):
    words = t.split()
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def without_byte_fallback(body):
    """The loop without the slow path of a partial tile: the outermost BSSY Bk .. BSYNC Bk regions that load
    bytes and issue at most one cp.async (the per-word copy; the fast path's copies are 8 cp.async)."""
    regions = []
    for i, u in enumerate(body):
        m = re.match(r"(?:@!?U?P\w+ )?BSSY (B\d+)", u)
        if not m:
            continue
        j = next((k for k in range(i + 1, len(body)) if re.match(rf"(?:@!?U?P\w+ )?BSYNC {m.group(1)}\b", body[k])), None)
        seg = body[i:j + 1] if j is not None else []
        if seg and any(re.search(r"\bLDG?\.E\.U8\b", v) for v in seg) and sum("LDGSTS" in v for v in seg) <= 1:
            regions.append((i, j))
    drop = set()
    for i, j in regions:
        if not any(a <= i and j <= b and (a, b) != (i, j) for a, b in regions):
            drop.update(range(i, j + 1))
    return [u for k, u in enumerate(body) if k not in drop]


def cmd_loops(a):
    funcs = sass(a.obj, a.arch)
    if not funcs:
        fail(f"no {a.arch} SASS in {a.obj}")
    shown = 0
    for name, ins in funcs.items():
        if a.function and a.function not in name:
            continue
        for addr, t in ins:
            m = BRANCH.search(t)
            if not m or int(m.group(1), 16) >= addr:
                continue
            body = [u for b, u in ins if int(m.group(1), 16) <= b <= addr]
            hmma = sum("HMMA" in u for u in body)
            if not hmma:
                continue
            fast = without_byte_fallback(body)
            top = collections.Counter(opcode(u) for u in fast).most_common(10)
            print(f"{name}\n  loop {int(m.group(1), 16):#x}-{addr:#x}: {len(body)} instructions, {len(fast)} without "
                  f"the byte-copy fallback; {hmma} HMMA, {sum('LDGSTS' in u for u in body)} LDGSTS; "
                  f"{' '.join(f'{o} {n}' for o, n in top)}")
            shown += 1
    if not shown:
        print("no loop with an HMMA" + (f" in a function matching {a.function}" if a.function else ""))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("same", help="per-function SASS identity of two object files")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--arch", default="sm_90,sm_120")
    l = sub.add_parser("loops", help="the HMMA loops of each function")
    l.add_argument("obj")
    l.add_argument("--arch", default="sm_90")
    l.add_argument("--function", default="")
    a = p.parse_args()
    sys.exit(cmd_same(a) if a.cmd == "same" else cmd_loops(a))


if __name__ == "__main__":
    main()
