#!/usr/bin/python3
"""Runs one tested recipe of a markdown page (docs/ANSWER_KIT.md), as a user would type it: the fenced blocks right after a line
`<!-- tested: NAME -->` (one, or several separated by blank lines only), in order. sh blocks run with `bash -e`, python blocks with this interpreter, in WORKDIR
(shared by the blocks of one ctest fixture chain), with `mlaconf` and `python3` (this interpreter) on PATH and `python/` of the checkout
linked into WORKDIR (so `python3 python/examples/...` works as from the checkout root).

usage: run_recipe.py PAGE.md NAME WORKDIR MLACONF_BIN_DIR
Exit: the block's status; 77 (ctest: skipped) when the block needs torch and torch is not installed.
"""
import os
import re
import subprocess
import sys


def blocks(page, name):
    text = open(page, encoding="utf-8").read()
    m = re.search(r"<!-- tested: " + re.escape(name) + r" -->\s*\n", text)
    if not m:
        sys.exit(f"run_recipe.py: {page} has no recipe <!-- tested: {name} -->")
    out, rest = [], text[m.end():]
    while True:
        b = re.match(r"\s*```(\w+)\n(.*?)\n```[ \t]*\n", rest, re.S)
        if not b:
            break
        out.append((b.group(1), b.group(2)))
        rest = rest[b.end():]
    if not out:
        sys.exit(f"run_recipe.py: recipe {name} has no fenced block")
    return out


def symlink_once(target, link):
    """Creates link -> target unless it exists; recipes of parallel ctest runs share WORKDIR and may race."""
    try:
        os.symlink(target, link)
    except FileExistsError:
        pass


def main():
    page, name, workdir, bindir = sys.argv[1:5]
    recipe = blocks(page, name)
    if any("import torch" in code for _, code in recipe):
        try:
            import torch  # noqa: F401
        except ImportError:
            print(f"not supported: block {name} needs torch, which is not installed (skipped)")
            return 77
    os.makedirs(workdir, exist_ok=True)
    link = os.path.join(workdir, "python")
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # suites/answer_kit/..
    symlink_once(os.path.join(checkout, "python"), link)
    # `python3` in a recipe is the interpreter running this (the one with numpy and h5py).
    shim = os.path.join(workdir, ".bin")
    os.makedirs(shim, exist_ok=True)
    symlink_once(sys.executable, os.path.join(shim, "python3"))
    env = dict(os.environ, PATH=bindir + os.pathsep + shim + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=os.path.abspath(link) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for lang, code in recipe:
        print(f"== recipe {name} ({lang}) in {workdir}:\n{code}\n==", flush=True)
        if lang in ("sh", "bash"):
            cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
        elif lang == "python":
            cmd = [sys.executable, "-c", code]
        else:
            sys.exit(f"run_recipe.py: recipe {name}: language {lang} is not run")
        rc = subprocess.call(cmd, cwd=workdir, env=env)
        if rc != 0:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
