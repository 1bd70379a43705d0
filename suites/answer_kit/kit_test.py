#!/usr/bin/python3
"""ctest cases for the Python answer kit (python/mlaconf_answer) and for what compare tells about it.

usage: kit_test.py CASE   (env: MLACONF_CLI, MLACONF_SOURCE_DIR, KIT_SCRATCH)
Each case is one ctest test (suites/answer_kit/CMakeLists.txt). Exit 0 pass, 1 fail, 77 skipped (ctest
SKIP_RETURN_CODE) with the reason printed.

The fixture is the committed one (fixtures/data/tiny-seed1.h5: op-level data of layer 1, 72 tokens >
top_k 64, one decode step), so the two wrong answers must fail; the 64-head recipes are docs/ANSWER_KIT.md's.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

SRC = os.environ["MLACONF_SOURCE_DIR"]
CLI = os.environ["MLACONF_CLI"]
SCRATCH = os.environ["KIT_SCRATCH"]
FIXTURE = os.path.join(SRC, "fixtures", "data", "tiny-seed1.h5")
EXAMPLES = os.path.join(SRC, "python", "examples")
PY = sys.executable
sys.path.insert(0, os.path.join(SRC, "python"))


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def run(args, expect=None):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if expect is not None and p.returncode != expect:
        raise Fail(f"{' '.join(args)}: exit {p.returncode}, want {expect}\n{p.stdout}")
    return p


def scratch(name):
    d = os.path.join(SCRATCH, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def compare(expected, actual, expect, tag):
    js = os.path.join(os.path.dirname(actual), tag + ".json")
    p = run([CLI, "compare", expected, actual, "--json", js], expect)
    with open(js) as f:
        return p.stdout, json.load(f)


def failing_paths(report):
    return sorted({d["path"] for d in report["datasets"] if d["verdict"] == "fail"})


# ---- cases -----------------------------------------------------------------------------------------------
def numpy_example_passes():
    d = scratch("numpy")
    ans = os.path.join(d, "answer.h5")
    run([PY, os.path.join(EXAMPLES, "numpy_sparse_mla.py"), FIXTURE, ans, "--layer", "1"], 0)
    out, rep = compare(FIXTURE, ans, 0, "report")
    judged = {x["path"]: x for x in rep["datasets"]}
    check("layers/1/attn_latent_out" in judged, out)
    check(judged["layers/1/attn_latent_out"]["verdict"] == "pass", out)
    check(rep["first_failure"] is None, f"first_failure should be null: {rep['first_failure']}")
    print(out)


def wrong_answer_fails_on_its_op(flag):
    d = scratch("wrong" + flag)
    ans = os.path.join(d, "answer.h5")
    run([PY, os.path.join(EXAMPLES, "numpy_sparse_mla.py"), FIXTURE, ans, "--layer", "1", flag], 0)
    out, rep = compare(FIXTURE, ans, 1, "report")
    # Exactly the op it breaks, in every case that holds it (the forward pass and the decode step).
    check(failing_paths(rep) == ["layers/1/attn_latent_out"], f"failing datasets {failing_paths(rep)}, want only layers/1/attn_latent_out\n{out}")
    ff = rep["first_failure"]
    check(ff is not None and ff["op"] == "attn_latent_out" and ff["layer"] == 1, f"first_failure {ff}")
    check("first failure: layer 1 attn_latent_out" in out, f"compare does not name the op:\n{out}")
    print(out)


def wrong_scale_fails_on_attn_latent_out():
    wrong_answer_fails_on_its_op("--wrong-scale")


def dense_fails_on_attn_latent_out():
    wrong_answer_fails_on_its_op("--dense")


def half_answers_judged_at_declared_precision():
    import numpy as np
    import mlaconf_answer as ma
    d = scratch("half")
    nmse = {}
    for prec in ("f16", "bf16", "bf16_declared_f64"):
        ans = ma.Answer(FIXTURE, precision="f64" if prec == "bf16_declared_f64" else None)

        @ans.register("sparse_mla", layers=[1])
        def half(q_absorbed, latent_cache, topk, scale, kv_lora):
            out = ma.reference.sparse_mla(q_absorbed, latent_cache, topk, scale, kv_lora)
            return out.astype(np.float16) if prec == "f16" else ma.as_bfloat16(out)

        path = os.path.join(d, prec + ".h5")
        ans.run().write(path)
        want_prec = "f64" if prec == "bf16_declared_f64" else prec
        check(ans.declared_precision() == want_prec, f"{prec}: declared {ans.declared_precision()}")
        out, rep = compare(FIXTURE, path, 1 if prec == "bf16_declared_f64" else 0, prec)
        r = [x for x in rep["datasets"] if x["path"] == "layers/1/attn_latent_out"]
        nmse[prec] = max(x["nmse"] for x in r)
        print(f"{prec}: attn_latent_out nmse {nmse[prec]:.3g}, verdicts {[x['verdict'] for x in r]}")
    # Stored as float16 / bfloat16 and read back by mlaconf through HDF5's conversion: the error is the
    # format's rounding alone (f16: ~1e-8, bf16: ~1e-6), so the values arrive intact.
    check(1e-10 < nmse["f16"] < 1e-6, f"f16 nmse {nmse['f16']}")
    check(1e-8 < nmse["bf16"] < 1e-4, f"bf16 nmse {nmse['bf16']}")


def torch_example_passes():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("not supported: torch is not installed (skipped)")
        sys.exit(77)
    d = scratch("torch")
    for dtype in ("bf16", "f16", "f32"):
        ans = os.path.join(d, dtype + ".h5")
        run([PY, os.path.join(EXAMPLES, "torch_sparse_mla.py"), FIXTURE, ans, "--layer", "1", "--dtype", dtype, "--device", "cpu"], 0)
        out, rep = compare(FIXTURE, ans, 0, dtype)
        print(out)
    ans = os.path.join(d, "wrong.h5")
    run([PY, os.path.join(EXAMPLES, "torch_sparse_mla.py"), FIXTURE, ans, "--layer", "1", "--wrong-scale", "--device", "cpu"], 0)
    out, rep = compare(FIXTURE, ans, 1, "wrong")
    check(failing_paths(rep) == ["layers/1/attn_latent_out"], out)


def pip_install_target():
    d = scratch("pip")
    src = os.path.join(d, "src")
    shutil.copytree(os.path.join(SRC, "python"), src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    target = os.path.join(d, "target")
    # Offline: no dependencies fetched (numpy/h5py are Debian's), the build backend is the installed setuptools.
    p = run([PY, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--target", target, src])
    if p.returncode != 0 and "No module named pip" in p.stdout:
        print("not supported: pip is not installed (skipped)")
        sys.exit(77)
    check(p.returncode == 0, p.stdout)
    env = dict(os.environ, PYTHONPATH=target)
    q = subprocess.run([PY, "-c", "import mlaconf_answer, sys; print(mlaconf_answer.__file__, mlaconf_answer.__version__)"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=d)
    check(q.returncode == 0 and q.stdout.startswith(target), q.stdout)
    script = os.path.join(target, "bin", "mlaconf-answer")
    check(os.path.exists(script), f"no console script {script}")
    ans = os.path.join(d, "answer.h5")
    r = subprocess.run([PY, script, FIXTURE, ans, "--layers", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=d)
    check(r.returncode == 0, r.stdout)
    compare(FIXTURE, ans, 0, "report")
    print(q.stdout + r.stdout)


def bad_input_exits_two():
    d = scratch("bad")
    not_h5 = os.path.join(SRC, "README.md")
    p = run([PY, os.path.join(EXAMPLES, "numpy_sparse_mla.py"), not_h5, os.path.join(d, "a.h5")], 2)
    check(p.stdout.count("\n") == 1 and "error:" in p.stdout, p.stdout)
    p = run([PY, os.path.join(EXAMPLES, "numpy_sparse_mla.py"), FIXTURE, os.path.join(d, "a.h5"), "--layer", "3"], 2)
    check("layer(s) [3]" in p.stdout, p.stdout)
    import numpy as np
    import mlaconf_answer as ma
    ans = ma.Answer(FIXTURE)
    ans.register("sparse_mla", lambda q_absorbed: np.zeros((1, 2, 3)), layers=[1])
    try:
        ans.run()
        raise Fail("a wrong shape was accepted")
    except ma.FixtureError as e:
        check("shape [1, 2, 3]" in str(e), str(e))
    check(not os.path.exists(os.path.join(d, "a.h5")), "an answer was written for bad input")


def png_comment(path):
    data = open(path, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG")
    i, texts = 8, []
    while i < len(data):
        n, kind = struct.unpack(">I4s", data[i:i + 8])
        body = data[i + 8:i + 8 + n]
        if kind == b"tEXt":
            texts.append(body.split(b"\0", 1)[1].decode())
        if kind == b"zTXt":
            texts.append(zlib.decompress(body.split(b"\0", 1)[1][1:]).decode())
        i += 12 + n
    return "\n".join(texts)


def dense_control_plot_names_first_failure():
    d = scratch("plot")
    g = os.path.join(d, "tiny.gguf")
    run([CLI, "synth", "--seed", "1", "-o", g], 0)
    good, dense = os.path.join(d, "good.h5"), os.path.join(d, "dense.h5")
    common = ["--model", g, "--random-tokens", "96", "--seed", "3", "--quiet"]
    run([CLI, "capture", *common, "--out", good], 0)
    run([CLI, "capture", *common, "--dense-attention", "--out", dense], 0)
    png = os.path.join(d, "dense.png")
    p = run([CLI, "compare", good, dense, "--plot", png, "--json", os.path.join(d, "r.json")], 1)
    rep = json.load(open(os.path.join(d, "r.json")))
    ff = rep["first_failure"]
    check(ff["layer"] == 0 and ff["op"] == "attn_latent_out", f"first_failure {ff}")
    check("first failure: layer 0 attn_latent_out" in p.stdout, p.stdout)
    title = png_comment(png).splitlines()[0]
    check(title == "FIRST FAILURE: LAYER 0 ATTN_LATENT_OUT", f"plot title {title!r}")
    # The passing control: the same capture against itself, titled ALL PASS.
    ok_png = os.path.join(d, "good.png")
    run([CLI, "compare", good, good, "--plot", ok_png], 0)
    check(png_comment(ok_png).splitlines()[0] == "ALL PASS", png_comment(ok_png))
    print(p.stdout.splitlines()[-1])
    print(png_comment(png))


CASES = {f.__name__: f for f in [numpy_example_passes, wrong_scale_fails_on_attn_latent_out, dense_fails_on_attn_latent_out,
                                 half_answers_judged_at_declared_precision, torch_example_passes, pip_install_target,
                                 bad_input_exits_two, dense_control_plot_names_first_failure]}

if __name__ == "__main__":
    try:
        import numpy  # noqa: F401
        import h5py  # noqa: F401
    except ImportError as e:
        print(f"not supported: {e} (skipped)")
        sys.exit(77)
    try:
        CASES[sys.argv[1]]()
    except Fail as e:
        print(f"FAIL: {e}")
        sys.exit(1)
