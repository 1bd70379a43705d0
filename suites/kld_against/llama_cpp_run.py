#!/usr/bin/env python3
"""Writes a RUN.json for `mlaconf kld --against` from REAL llama.cpp output (llama-cpp-python).

    llama_cpp_run.py MODEL.gguf OUT.json [--prompt-tokens 96] [--max-tokens 8] [--logprobs 5] [--seed 7]
                     [--server-shape [--prompt-logprobs]] [--echo]

The prompt is a seeded list of token ids (the same generator for every run: ids in [1, n_vocab)); llama.cpp
generates greedily (temperature 0) with flash attention off. OUT.json is llama-cpp-python's own
create_completion() response (the OpenAI completions shape: choices[0].logprobs with tokens,
token_logprobs, top_logprobs, text_offset) with `prompt_token_ids` added (the ids sent: the response names
none) and an `engine` note. The generated tokens are strings only (llama-cpp-python returns no ids):
`mlaconf kld --against` maps them through the GGUF's tokenizer, which refuses an ambiguous string.
--server-shape writes llama.cpp server's shape (completion_probabilities, by id) from llama.cpp's own logits;
with --prompt-logprobs also the prompt's rows in vLLM's prompt_logprobs shape (llama.cpp's server returns none),
from the same logits. --echo asks create_completion() to echo the prompt with its logprobs.
Exit 3 with "not supported: llama_cpp not installed" when the package cannot be imported.
"""
import argparse
import json
import random
import sys

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("out")
ap.add_argument("--prompt-tokens", type=int, default=96)
ap.add_argument("--max-tokens", type=int, default=8)
ap.add_argument("--logprobs", type=int, default=5)
ap.add_argument("--seed", type=int, default=7)
ap.add_argument("--server-shape", action="store_true",
                help="write llama.cpp server's shape (completion_probabilities with ids) from llama.cpp's own logits")
ap.add_argument("--prompt-logprobs", action="store_true",
                help="with --server-shape: add the prompt's rows as vLLM's prompt_logprobs, from llama.cpp's logits")
ap.add_argument("--echo", action="store_true", help="create_completion(echo=True): the prompt's tokens and logprobs first")
args = ap.parse_args()
try:
    import llama_cpp
except Exception as e:  # ImportError, or a missing dependency of the package
    print(f"not supported: llama_cpp not installed ({type(e).__name__}: {e})")
    sys.exit(3)

llm = llama_cpp.Llama(model_path=args.model, n_ctx=256, n_batch=256, n_threads=2, logits_all=True,
                      flash_attn=False, seed=args.seed, verbose=False)
rng = random.Random(args.seed)
prompt = [rng.randrange(1, llm.n_vocab()) for _ in range(args.prompt_tokens)]
if args.server_shape:
    # What llama.cpp's server returns for n_probs: per step the chosen id and the top-N of the softmax of
    # the raw logits, by id. The logits are llama.cpp's (Llama.eval, logits_all); greedy, one token at a time.
    import numpy as np

    def logprobs_of(row):
        row = np.asarray(row, dtype=np.float64)
        lp = row - row.max()
        return lp - np.log(np.exp(lp).sum())

    llm.reset()
    llm.eval(prompt)
    prompt_logprobs = [None]
    if args.prompt_logprobs:
        # vLLM's shape: entry p (p >= 1) is row p - 1's top-N by id, plus the prompt token's own entry.
        for p in range(1, len(prompt)):
            lp = logprobs_of(llm.scores[p - 1])
            order = sorted(range(len(lp)), key=lambda v: (-lp[v], v))
            rank = {v: i + 1 for i, v in enumerate(order)}
            entry = {}
            for v in order[:args.logprobs] + [prompt[p]]:
                entry[str(v)] = {"logprob": float(lp[v]), "rank": rank[v],
                                 "decoded_token": llm.detokenize([v]).decode("utf-8", errors="replace")}
            prompt_logprobs.append(entry)
    steps = []
    for _ in range(args.max_tokens):
        lp = logprobs_of(llm.scores[llm.n_tokens - 1])
        order = sorted(range(len(lp)), key=lambda v: (-lp[v], v))[:args.logprobs]
        tid = order[0]
        text = llm.detokenize([tid]).decode("utf-8", errors="replace")
        steps.append({"id": tid, "token": text, "logprob": float(lp[tid]),
                      "top_logprobs": [{"id": v, "token": llm.detokenize([v]).decode("utf-8", errors="replace"),
                                        "logprob": float(lp[v])} for v in order]})
        llm.eval([tid])
    r = {"content": "".join(s["token"] for s in steps), "completion_probabilities": steps}
    if args.prompt_logprobs:
        r["prompt_logprobs"] = prompt_logprobs
else:
  if args.echo:
      # create_completion(echo=True) takes a text prompt only (a list of ids fails in its echo: list + str):
      # the ids' text, and as prompt_token_ids the ids llama-cpp-python makes of it (its own tokenize call).
      text = llm.detokenize(prompt).decode("utf-8", errors="ignore")
      prompt = llm.tokenize(text.encode("utf-8"), special=True)
      r = llm.create_completion(prompt=text, max_tokens=args.max_tokens, logprobs=args.logprobs, temperature=0.0,
                                top_k=1, seed=args.seed, echo=True)
  else:
      r = llm.create_completion(prompt=prompt, max_tokens=args.max_tokens, logprobs=args.logprobs, temperature=0.0,
                                top_k=1, seed=args.seed)
r["prompt_token_ids"] = prompt
r["engine"] = f"llama-cpp-python {llama_cpp.__version__}, flash_attn off, temperature 0" + (", echo" if args.echo else "")
with open(args.out, "w") as f:
    json.dump(r, f, indent=1, ensure_ascii=False, default=float)  # its logprobs are numpy float32
    f.write("\n")
n = len(r["completion_probabilities"]) if args.server_shape else len(r["choices"][0]["logprobs"]["tokens"])
print(f"wrote {args.out}: {len(prompt)} prompt ids, {n} generated tokens")
