#!/usr/bin/env python3
"""The docs' tables against the code they describe.

usage: test_docs.py SOURCE_DIR CASE [MLACONF]
  cuda_limits  docs/CUDA.md's limits table: each row's code column names constants of optimized/ (their values,
               evaluated from their definitions, must be the value column's numbers, in order) or conditions
               (each must stand, as written, in a file of optimized/).
  cuda_files   docs/CUDA.md's file table: every file of optimized/ matches a row (a name or a glob), and every
               row matches a file.
  perf_links   no file of the tree names the retired docs/PERF_H200*.md; every docs/perf/NAME.md named in the
               tree exists; every file of docs/perf/ is listed in docs/perf/README.md.
  cli_options  every `mlaconf SUBCOMMAND ...` (or `$M SUBCOMMAND ...`) line in the code blocks of README.md and
               the docs it sends readers to first (CLI.md, JUDGING.md, ANSWER_KIT.md) names a subcommand
               and options that `MLACONF SUBCOMMAND --help` lists.
Exit 0 pass, 1 fail (one line per problem).
"""
import fnmatch
import os
import re
import subprocess
import sys

SRC = sys.argv[1]


def read(rel):
    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        return f.read()


def table_after(text, marker):
    """The rows (lists of cells) of the first markdown table after the line holding `marker`."""
    i = text.index(marker)
    rows = []
    for line in text[i:].split("\n")[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if set("".join(cells)) <= set("-: "):
            continue
        rows.append(cells)
    return rows[1:]  # without the header


def optimized_sources():
    d = os.path.join(SRC, "optimized")
    out = {}
    for root, _, files in os.walk(d):
        for n in files:
            if n.endswith((".cu", ".cuh", ".h", ".cpp", ".inc")):
                with open(os.path.join(root, n), encoding="utf-8") as f:
                    out[os.path.relpath(os.path.join(root, n), SRC)] = f.read()
    return out


def constants(sources):
    """value(name) -> the value of an integer or float `constexpr` of optimized/ whose definition evaluates
    (literals, other such names, + - * / <<), or None. A name is resolved in its own file first (kThreads, kWarps
    and others are defined in several files); a name defined in several files with different values is None."""
    defs = {}  # name -> {file: expression}
    for rel, text in sources.items():
        for m in re.finditer(r"constexpr\s+(?:int|int64_t|size_t|unsigned|uint32_t|uint64_t|float)\s+(\w+\s*=\s*[^;]+);", text):
            for part in m.group(1).split(","):  # `constexpr int a = 1, b = 2;`
                if "=" in part:
                    name, expr = part.split("=", 1)
                    defs.setdefault(name.strip(), {}).setdefault(rel, expr.strip())

    def evaluate(name, rel, depth):
        expr = defs[name][rel]
        expr = re.sub(r"\((?:int64_t|int|size_t|uint64_t)\)|(?:int64_t|uint64_t|size_t)\{(\w+)\}", lambda m: m.group(1) or "", expr)
        expr = re.sub(r"(\d+(?:\.\d*)?)f\b", r"\1", expr)

        def sub(m):
            v = value_in(m.group(0), rel, depth + 1)
            if v is None:
                raise ValueError(m.group(0))
            return str(v)

        try:
            expr = re.sub(r"\b[A-Za-z_]\w*\b", sub, expr)
            if not re.fullmatch(r"[\d\s+\-*/()<.]+", expr):
                return None
            return eval(expr.replace("/", "//") if "." not in expr else expr)  # noqa: S307 (digits and operators only)
        except (ValueError, SyntaxError, ZeroDivisionError):
            return None

    def value_in(name, rel, depth=0):
        if name not in defs or depth > 20:
            return None
        if rel in defs[name]:
            return evaluate(name, rel, depth)
        values = {evaluate(name, r, depth) for r in defs[name]}
        return values.pop() if len(values) == 1 else None

    return lambda name: value_in(name, None)


def cuda_limits():
    rows = table_after(read("docs/CUDA.md"), "<!-- limits table")
    sources = optimized_sources()
    value = constants(sources)
    problems = []
    if len(rows) < 10:
        problems.append(f"docs/CUDA.md limits table: only {len(rows)} rows found")
    for limit, val, code in rows:
        items = re.findall(r"`([^`]+)`", code)
        if not items:
            problems.append(f"limits row '{limit}': no code named")
        names = [c for c in items if re.fullmatch(r"k[A-Z]\w*", c)]
        conditions = [c for c in items if c not in names]
        if names:
            want = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", val)]
            got = [value(n) for n in names]
            if None in got:
                problems.append(f"limits row '{limit}': {names[got.index(None)]} is no constant of optimized/ with one value")
            elif want != [float(g) for g in got]:
                problems.append(f"limits row '{limit}': the doc says {val}, the code's {', '.join(names)} = {got}")
        for c in conditions:
            if not any(c in t for t in sources.values()):
                problems.append(f"limits row '{limit}': the condition `{c}` stands nowhere in optimized/")
    return problems


def cuda_files():
    rows = table_after(read("docs/CUDA.md"), "<!-- files table")
    patterns = [p for r in rows for p in re.findall(r"`([^`]+)`", r[0])]
    d = os.path.join(SRC, "optimized")
    files = sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)))
    problems = [f"optimized/{n} is in no row of docs/CUDA.md's file table" for n in files
                if not any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    problems += [f"docs/CUDA.md's file table names `{p}`, which matches no file of optimized/" for p in patterns
                 if not any(fnmatch.fnmatchcase(n, p) for n in files)]
    return problems


def tracked_text_files():
    out = subprocess.run(["git", "-C", SRC, "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True)
    if out.returncode != 0:  # not a checkout (an unpacked tarball): every file below SRC
        return [os.path.relpath(os.path.join(r, n), SRC) for r, _, fs in os.walk(SRC) for n in fs]
    return [p for p in out.stdout.split("\n") if p]


def perf_links():
    problems = []
    perf = os.path.join(SRC, "docs", "perf")
    for rel in tracked_text_files():
        path = os.path.join(SRC, rel)
        if rel == "suites/docs/test_docs.py":  # this file names them to find them
            continue
        if not rel.endswith((".md", ".cu", ".cuh", ".h", ".cpp", ".py", ".sh", ".txt", ".cmake")) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in re.finditer(r"PERF_H200\w*", text):
            problems.append(f"{rel}: names the retired {m.group(0)} (docs/perf/README.md lists the file of each version)")
        for m in re.finditer(r"docs/perf/([\w.-]+\.md)", text):
            if not os.path.exists(os.path.join(perf, m.group(1))):
                problems.append(f"{rel}: names docs/perf/{m.group(1)}, which does not exist")
    index = read("docs/perf/README.md")
    for n in sorted(os.listdir(perf)):
        if n != "README.md" and f"({n})" not in index:
            problems.append(f"docs/perf/{n} is not listed in docs/perf/README.md")
    return problems


def doc_commands(rel):
    """(line, subcommand, options) of each mlaconf command in the fenced blocks of `rel`."""
    out, block = [], False
    lines = read(rel).split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):  # a command continued on the next line
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i]
        i += 1
        if line.lstrip().startswith("```"):
            block = not block
            continue
        m = re.match(r"\s*(?:\$M|mlaconf)\s+([a-z]+)(.*)", line) if block else None
        if m:
            args = m.group(2).split(" #")[0]
            opts = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])", args)
            out.append((line.strip(), m.group(1), opts))
    return out


def cli_options():
    cli = sys.argv[3] if len(sys.argv) > 3 else ""
    if not os.access(cli, os.X_OK):
        print(f"skipped: no mlaconf at '{cli}'")
        sys.exit(77)
    problems, helps, n = [], {}, 0
    for rel in ["README.md", "docs/CLI.md", "docs/JUDGING.md", "docs/ANSWER_KIT.md"]:
        for line, sub, opts in doc_commands(rel):
            n += 1
            if sub not in helps:
                r = subprocess.run([cli, sub, "--help"], capture_output=True, text=True)
                ok = r.returncode == 0 and re.search(r"Usage: \S*mlaconf " + sub + r"\b", r.stdout)
                helps[sub] = r.stdout if ok else None  # an unknown word gets the program's help, not an error
            if helps[sub] is None:
                problems.append(f"{rel}: `{line}`: mlaconf has no subcommand {sub}")
                continue
            for o in opts:
                if not re.search(r"(?<![\w-])" + re.escape(o) + r"(?![\w-])", helps[sub]):
                    problems.append(f"{rel}: `{line}`: `mlaconf {sub} --help` lists no {o}")
    if n < 20:
        problems.append(f"only {n} mlaconf commands found in the docs' code blocks")
    return problems


CASES = {"cuda_limits": cuda_limits, "cuda_files": cuda_files, "perf_links": perf_links, "cli_options": cli_options}

if __name__ == "__main__":
    problems = CASES[sys.argv[2]]()
    for p in problems:
        print(p)
    print(f"{sys.argv[2]}: {'FAIL' if problems else 'ok'} ({len(problems)} problems)")
    sys.exit(1 if problems else 0)
