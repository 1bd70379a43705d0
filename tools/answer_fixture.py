#!/usr/bin/python3
"""Answer an mlaconf fixture from outside C++: an example of the mlaconf_answer package (python/).

For every case and layer of FIXTURE that holds the op-level inputs, computes two ops in float64 numpy
(the package's reference versions, mlaconf_answer.ops) and writes an answer file that
`mlaconf compare FIXTURE ANSWER` judges:

  indexer      indexer_q, indexer_k, indexer_weights -> indexer_scores, indexer_topk
  sparse_mla   q_absorbed, latent_cache, indexer_topk -> attn_latent_out

--dense is a deliberately wrong answer (dense causal attention, the indexer ignored): compare must fail it
whenever some query has more causal keys than top_k.

usage: answer_fixture.py FIXTURE.h5 ANSWER.h5 [--case NAME] [--dense]
Runs from a checkout without installing the package (it finds python/ beside tools/).
"""
import argparse
import os
import sys

try:
    import mlaconf_answer as ma
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import mlaconf_answer as ma


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture")
    ap.add_argument("answer")
    ap.add_argument("--case", help="answer only this case")
    ap.add_argument("--dense", action="store_true", help="wrong on purpose: dense instead of sparse attention")
    a = ap.parse_args()
    try:
        ans = ma.Answer(a.fixture, precision="f64", backend="python-numpy" + (" dense (wrong on purpose)" if a.dense else ""))
        cases = [a.case] if a.case else None
        ans.register("indexer", ma.reference.indexer, cases=cases)
        ans.register("sparse_mla", ma.reference.dense_mla if a.dense else ma.reference.sparse_mla, cases=cases)
        n = ans.run().write(a.answer)
    except ma.FixtureError as e:
        print(f"answer_fixture.py: error: {e}", file=sys.stderr)
        return 2
    print(f"answer_fixture.py: answered {n} datasets in {len(ans.results)} case(s) -> {a.answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
