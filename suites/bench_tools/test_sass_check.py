#!/usr/bin/env python3
"""bench/sass_check.py on made-up SASS (exit 0 pass, 1 fail; no CUDA toolkit needed).

A fake `cuobjdump` first on PATH prints, for an object file X.o, the text of X.sass beside it (the same text
for every -arch). Checked:
- `same`: two listings that differ only in their encodings are identical (exit 0); one changed instruction
  is reported with its function and position (exit 1).
- `loops`: a loop of 21 instructions holding an HMMA, whose block copy is a BSSY region holding the fast path
  (8 cp.async, kept) and, nested, a byte-copy fallback (a byte load and one cp.async, dropped): 21
  instructions, 15 without the fallback. Loops without an HMMA (the fallback's own, the trailing self-branch) are not listed.
- bad input: a missing object file is exit 2 with one line.
"""
import os
import subprocess
import sys
import tempfile

from checks import Checks

FAKE = """#!/usr/bin/env python3
import os, sys
obj = sys.argv[-1]
sys.stdout.write(open(os.path.splitext(obj)[0] + ".sass").read())
"""


def listing(functions):
    """cuobjdump -sass text: {name: [instruction, ...]}, each at 16-byte steps, with made-up encodings."""
    out = ["", "Fatbin elf code:", "================", "arch = sm_90", "", "\tcode for sm_90"]
    for name, ins in functions.items():
        out.append(f"\t\tFunction : {name}")
        out.append('\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"')
        for k, t in enumerate(ins):
            enc = (hash((name, k, t)) & 0xFFFFFFFFFFFF) if name else 0
            out.append(f"        /*{16 * k:04x}*/                   {t} ;    /* 0x{enc:016x} */")
        out.append("\t\t..........")
    return "\n".join(out) + "\n"


def kernel_with_loop():
    # As in gemv_mma_kernel: the copy of a block is one BSSY region (B1) holding the fast path (8 cp.async) and,
    # nested, the fallback (B2: a byte load and one cp.async). Only B2 is dropped.
    return [
        "LDC R1, c[0x0][0x28]",                          # 0x000
        "MOV R0, RZ",                                    # 0x010  loop head
        "BSSY B1, 0x120",                                # 0x020
    ] + [f"LDGSTS.E.BYPASS.128 [R{4 + i}], desc[UR4][R2.64]" for i in range(8)] + [  # 0x030 .. 0x0a0
        "BSSY B2, 0x110",                                # 0x0b0  the fallback
        "LDG.E.U8 R12, desc[UR4][R2.64]",                # 0x0c0
        "LDGSTS.E.BYPASS.128 [R12], desc[UR4][R2.64]",
        "STS.U8 [R13], R12",
        "@P0 BRA 0xc0",                                  # 0x0f0: the fallback's own loop (no HMMA)
        "BSYNC B2",                                      # 0x100
        "BSYNC B1",                                      # 0x110
        "HMMA.16816.F32 R20, R24, R28, R20",             # 0x120
        "IADD3 R0, R0, 0x1, RZ",
        "ISETP.NE.AND P1, PT, R0, 0x6, PT",
        "@P1 BRA 0x10",                                  # 0x150: back to the loop head
        "EXIT",
        "BRA 0x170",                                     # the usual trailing self-branch (no HMMA)
    ]


def run(tool, env, *args):
    r = subprocess.run([sys.executable, tool, *args], capture_output=True, text=True, env=env)
    return r.returncode, r.stdout + r.stderr


def main():
    tool = sys.argv[1]
    c = Checks("sass_check")
    check = c.check

    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "cuobjdump")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, 0o755)
        env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""))

        ins = kernel_with_loop()
        base = {"_Z1kv": ins, "_Z1gv": ["MOV R0, RZ", "EXIT", "BRA 0x20"]}
        changed = {"_Z1kv": ins[:3] + ["LDGSTS.E.BYPASS.128 [R40], desc[UR4][R2.64]"] + ins[4:], "_Z1gv": base["_Z1gv"]}
        for stem, funcs in (("a", base), ("b", base), ("c", changed)):
            with open(os.path.join(d, stem + ".o"), "w") as f:
                f.write("not an object: the fake cuobjdump reads the .sass beside it\n")
            with open(os.path.join(d, stem + ".sass"), "w") as f:
                f.write(listing(funcs))
        # b's encodings differ from a's: listing() hashes the name into them; make them differ for sure
        with open(os.path.join(d, "b.sass")) as f:
            text = f.read().replace("/* 0x0", "/* 0x1")
        with open(os.path.join(d, "b.sass"), "w") as f:
            f.write(text)

        rc, out = run(tool, env, "same", os.path.join(d, "a.o"), os.path.join(d, "b.o"))
        check(rc == 0 and "sm_90: 2 of 2 functions identical" in out and "sm_120: 2 of 2" in out,
              f"same a b: rc {rc}, output:\n{out}")
        rc, out = run(tool, env, "same", os.path.join(d, "a.o"), os.path.join(d, "c.o"), "--arch", "sm_90")
        check(rc == 1 and "1 of 2 functions identical" in out and "_Z1kv" in out and "first difference at 3" in out
              and "[R40]" in out, f"same a c: rc {rc}, output:\n{out}")

        rc, out = run(tool, env, "loops", os.path.join(d, "a.o"))
        lines = [l for l in out.splitlines() if "loop" in l]
        check(rc == 0 and len(lines) == 1, f"loops: rc {rc}, expected one HMMA loop:\n{out}")
        check(any("loop 0x10-0x150: 21 instructions, 15 without the byte-copy fallback; 1 HMMA, 9 LDGSTS" in l
                  for l in lines), f"loops: wrong counts:\n{out}")
        rc, out = run(tool, env, "loops", os.path.join(d, "a.o"), "--function", "_Z1gv")
        check(rc == 0 and "no loop with an HMMA" in out, f"loops --function _Z1gv: rc {rc}:\n{out}")

        rc, out = run(tool, env, "loops", os.path.join(d, "missing.o"))
        check(rc == 2 and out.strip().count("\n") == 0 and "no such file" in out, f"missing file: rc {rc}:\n{out}")

    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
