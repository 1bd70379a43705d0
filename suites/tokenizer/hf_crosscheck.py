#!/usr/bin/env python3
"""Independent cross-checks for suites/tokenizer (test only; the product never runs this).

usage: hf_crosscheck.py MODE GGUF INPUT OUTPUT [ORACLE_H5]
  MODE encode: Hugging Face `tokenizers` BPE built from the GGUF's vocabulary and merges (read with
               llama.cpp's gguf-py), Split(regex, isolated) + ByteLevel(use_regex=False), control
               tokens added as special tokens. Output line: "id id id|hex(decode(ids))".
  MODE split:  Python `regex` split of each text into matches and gaps. Output: "hex,hex,...".
  MODE utf8:   bytes.decode("utf-8", "replace") of each input's bytes. Output: hex.
INPUT holds one "x" + hex-encoded string per line. The glm4 split regex is read from the oracle's
`prompts_info` attribute (ORACLE_H5) when given, else the literal below (the GLM-4 tokenizer.json one).
Exit 3 with a reason on stderr when a module is missing.
"""
import json
import sys

GLM4_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def need(mod):
    try:
        return __import__(mod)
    except ImportError as e:
        print(f"python module '{mod}' not installed ({e})", file=sys.stderr)
        sys.exit(3)


def split_regex(oracle):
    if oracle:
        try:
            import h5py
            with h5py.File(oracle, "r") as h:
                return json.loads(h.attrs["prompts_info"])["split_regex"]
        except Exception:
            pass
    return GLM4_SPLIT


def main():
    mode, gguf_path, inp, outp = sys.argv[1:5]
    oracle = sys.argv[5] if len(sys.argv) > 5 else ""
    lines = open(inp).read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    data = [bytes.fromhex(l[1:]) for l in lines]  # each line is "x" + hex
    out = []
    if mode == "utf8":
        out = [d.decode("utf-8", "replace").encode("utf-8").hex() for d in data]
    elif mode == "split":
        regex = need("regex")
        pat = regex.compile(split_regex(oracle))
        for d in data:
            s = d.decode("utf-8")
            pieces, last = [], 0
            for m in pat.finditer(s):
                if m.start() == m.end():
                    continue
                if m.start() > last:
                    pieces.append(s[last:m.start()])
                pieces.append(m.group())
                last = m.end()
            if last < len(s):
                pieces.append(s[last:])
            out.append(",".join(p.encode("utf-8").hex() for p in pieces))
    elif mode == "encode":
        gguf = need("gguf")
        tokenizers = need("tokenizers")
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
        r = gguf.GGUFReader(gguf_path)

        def strings(key):
            f = r.fields[key]
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

        tokens = strings("tokenizer.ggml.tokens")
        merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
        f = r.fields["tokenizer.ggml.token_type"]
        types = [int(f.parts[i][0]) for i in f.data]
        pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
        # glm4 and llama-bpe share the split regex; llama-3 tokenizer.json files set ignore_merges.
        if pre not in ("glm4", "llama-bpe"):
            print(f"cross-check knows only pre 'glm4' and 'llama-bpe', not '{pre}'", file=sys.stderr)
            sys.exit(3)
        tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                                  ignore_merges=(pre == "llama-bpe")))
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split_regex(oracle)), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tk.decoder = decoders.ByteLevel()
        tk.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                               for i in range(len(tokens)) if types[i] == 3])
        for d in data:
            ids = tk.encode(d.decode("utf-8"), add_special_tokens=False).ids
            text = tk.decode(ids, skip_special_tokens=False)
            out.append(" ".join(map(str, ids)) + "|" + text.encode("utf-8").hex())
    else:
        print(f"unknown mode {mode}", file=sys.stderr)
        sys.exit(2)
    with open(outp, "w") as fo:
        fo.write("\n".join(out) + ("\n" if out else ""))


if __name__ == "__main__":
    main()
