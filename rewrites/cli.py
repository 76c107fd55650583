"""`saturn rules`: list every rewrite rule by family; `--check` verifies each one on random
inputs against a float64 evaluation of its left side with an error bound (rewrites.check)."""
from __future__ import annotations

import argparse
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="check every rule on random inputs (shapes, dtypes)")
    parser.add_argument("--family", help="only this family (algebra, reduction, online_softmax, fusion, matmul, user)")
    parser.add_argument("--trials", type=int, default=12, help="random instances per rule for --check (default 12)")


def run(args) -> int:
    from rewrites.check import check_rule
    from rewrites.pattern import show, show_guard
    from rewrites.registry import families, family_rules

    from compiler.errors import OptionError
    if args.family and args.family not in families():
        raise OptionError(f"unknown rule family {args.family!r}; families: {', '.join(families())}", "rules")
    if args.trials < 1:
        raise OptionError(f"--trials must be at least 1, got {args.trials}", "rules")
    fams = [args.family] if args.family else families()
    failed = total = 0
    t0 = time.perf_counter()
    for fam in fams:
        rules = family_rules(fam, include_unstable=True)
        print(f"{fam} ({len(rules)} rules)")
        for r in rules:
            total += 1
            guard = f"   if {', '.join(show_guard(g) for g in r.guard)}" if r.guard else ""
            mark = "   [unstable: not in the default search]" if r.unstable else ""
            line = f"  {r.name:<28} {show(r.lhs)} -> {show(r.rhs)}{guard}{mark}"
            if args.check:
                res = check_rule(r, trials=args.trials)
                status = f"ok ({res.trials})" if res.ok else "FAIL"
                line = f"  {status:<8}" + line[1:]
                if not res.ok:
                    failed += 1
                    line += f"\n           {res.message}"
            print(line)
    if args.check:
        print(f"\n{total - failed}/{total} rules sound on random inputs "
              f"({args.trials} instances each, f32/f16/bf16, normal, x200, offset and cancelling inputs) in {time.perf_counter() - t0:.1f} s")
    return 1 if failed else 0
