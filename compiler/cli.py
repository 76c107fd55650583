"""The `saturn` command line. Each subcommand lives in its own module with
`add_arguments(parser)` and `run(args) -> int`."""
from __future__ import annotations

import argparse
import importlib
import sys

from backends.base import BackendUnavailable
from compiler.errors import SaturnError

# (name, module, one-line help)
COMMANDS = [
    ("demo", "compiler.demo", "compile and run a small transformer block, print the result"),
    ("rules", "rewrites.cli", "list the rewrite rules by family; --check verifies each on random inputs"),
    ("explain", "compiler.explain_cli", "compile a built-in workload and show what the compiler chose and why"),
    ("bench", "benchmarks.cli", "benchmark Saturn against PyTorch eager (and torch.compile where installed)"),
    ("fuzz", "compiler.fuzz", "random programs against an independent float64 reference; failures minimized"),
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="saturn", description="Saturn: an e-graph superoptimizing tensor compiler.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, module, help_text in COMMANDS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if not module.startswith(e.name or "?"):
                raise  # a real missing dependency inside the command's module
            continue
        sp = sub.add_parser(name, help=help_text, description=help_text)
        mod.add_arguments(sp)
        sp.set_defaults(run=mod.run)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return args.run(args) or 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (SaturnError, BackendUnavailable) as e:   # a bad input: one line, no traceback
        print(f"saturn {args.command}: {type(e).__name__}: {first_line(e)}", file=sys.stderr)
        return 2


def first_line(e: BaseException) -> str:
    """The message without SaturnError's "at file:line" (here that is the saturn script)."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
