#!/usr/bin/env python3
"""Checks golden_compare.py: last-bit differences pass, anything larger or structural fails.

Usage: /usr/bin/python3 tests/conformance/test_golden_compare.py (exit status 0 on success)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_compare  # noqa: E402

BASE = """case a
op exp
param dim 1 0
input f64 1 3 : 0.5 -1.0 2.0
output f64 1 3 : 1.6487212707001282 0.36787944117144233 7.38905609893065
end
case b
op sum
input f32 1 2 : 1.0 2.0
output f32 0 : 3.0
output i64 1 2 : 4 5
end
loss 0.25
"""


def run(committed, fresh, *flags):
    with tempfile.TemporaryDirectory() as d:
        pa, pb = os.path.join(d, "a"), os.path.join(d, "b")
        with open(pa, "w") as f:
            f.write(committed)
        with open(pb, "w") as f:
            f.write(fresh)
        return golden_compare.main([pa, pb] + list(flags))


def main():
    checks = [
        ("identical", BASE, 0),
        ("one ulp in an f64 output",
         BASE.replace("1.6487212707001282", "1.6487212707001284"), 0),
        ("one ulp in an f32 output", BASE.replace("output f32 0 : 3.0",
                                                  "output f32 0 : 3.0000002384185791"), 0),
        ("1e-12 relative in f64", BASE.replace("7.38905609893065", "7.38905609894065"), 1),
        ("an integer output", BASE.replace("4 5", "4 6"), 1),
        ("a parameter", BASE.replace("param dim 1 0", "param dim 1 1"), 1),
        ("an op", BASE.replace("op sum", "op prod"), 1),
        ("a shape", BASE.replace("input f32 1 2 :", "input f32 1 3 :"), 1),
        ("a line more", BASE + "end\n", 1),
        ("nan for a number", BASE.replace("0.36787944117144233", "nan"), 1),
        ("a loss far off", BASE.replace("loss 0.25", "loss 0.2500001"), 1),
        ("a loss one ulp off", BASE.replace("loss 0.25", "loss 0.25000000000000006"), 0),
    ]
    failed = 0
    for name, fresh, want in checks:
        got = run(BASE, fresh)
        if got != want:
            print("test_golden_compare: %s: exit %d, expected %d" % (name, got, want))
            failed += 1
    if run(BASE, BASE.replace("1.6487212707001282", "1.6487212707001284"), "--exact") != 1:
        print("test_golden_compare: --exact accepted a difference")
        failed += 1
    print("test_golden_compare: %d of %d checks passed" % (len(checks) + 1 - failed,
                                                           len(checks) + 1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
