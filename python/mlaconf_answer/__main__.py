"""mlaconf-answer FIXTURE ANSWER: answer a fixture with this package's plain numpy ops (float64).

A starting point and a check of the kit itself: the answer passes `mlaconf compare FIXTURE ANSWER`.
--list shows what a fixture holds: cases, and the layers each op can be answered for.
Exit 0 written, 2 unusable input.
"""
import argparse
import sys

from . import reference
from .answer import PRECISIONS, Answer
from .errors import FixtureError
from .fixture import Fixture
from .ops import OPS


def main(argv=None):
    ap = argparse.ArgumentParser(prog="mlaconf-answer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture")
    ap.add_argument("answer", nargs="?")
    ap.add_argument("--ops", default="indexer,sparse_mla", help="comma list of ops to answer (default: %(default)s)")
    ap.add_argument("--layers", help="comma list of layers (default: every layer with the op's inputs)")
    ap.add_argument("--case", help="answer only this case")
    ap.add_argument("--precision", choices=PRECISIONS, help="precision the judge holds the answer to (default: f64)")
    ap.add_argument("--list", action="store_true", help="list cases and answerable (op, layers), write nothing")
    a = ap.parse_args(argv)
    try:
        fx = Fixture(a.fixture)
        if a.list:
            for case in fx.cases():
                ops = {op: [l for l in fx.layers(case) if fx.has_op(op, case, l)] for op in OPS}
                print(case + ": " + ", ".join(f"{op} layers {ls}" for op, ls in ops.items() if ls) if any(ops.values()) else case + ": no op-level inputs")
            return 0
        if not a.answer:
            raise FixtureError("give ANSWER (the file to write), or --list")
        layers = [int(x) for x in a.layers.split(",")] if a.layers else None
        cases = [a.case] if a.case else None
        ans = Answer(fx, precision=a.precision or "f64", backend="mlaconf_answer numpy reference")
        impl = {"sparse_mla": reference.sparse_mla, "indexer": reference.indexer}
        for op in a.ops.split(","):
            if op not in impl:
                raise FixtureError(f"unknown op {op!r}: want {', '.join(impl)}")
            ans.register(op, impl[op], layers=layers, cases=cases)
        n = ans.run().write(a.answer)
        print(f"mlaconf-answer: answered {n} datasets in {len(ans.results)} case(s) -> {a.answer}")
        return 0
    except (FixtureError, ValueError) as e:
        print(f"mlaconf-answer: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
