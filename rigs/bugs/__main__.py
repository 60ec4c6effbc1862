"""``python -m rigs.bugs run [IDS...] [--engine E]`` / ``python -m rigs.bugs table [--check]``.

``run`` runs each chosen entry on its affected and its fixed release, each in that release's venv
(a missing venv is an error naming the command that makes it), and records the rows in
``rigs/bugs/results.json`` (the other entries' rows kept); ``table`` renders the table into
``docs/bugs.md``, ``--check`` fails when the file is out of date.
"""

from __future__ import annotations

import argparse
import sys
import time

from rigs.bugs import catalog, results, runner, table
from rigs.venv import Unavailable

__all__ = ["main"]


def _run(ids: list[str], engine: str) -> int:
    runs = results.load()
    failed = 0
    for bug in catalog.select(ids, engine):
        got = {}
        for key, release in zip(("affected", "fixed"), bug.releases, strict=True):
            started = time.monotonic()
            try:
                got[key] = runner.run(bug, release)
            except (RuntimeError, Unavailable) as exc:
                print(f"{bug.id} {release}: FAILED: {exc}", file=sys.stderr)
                failed += 1
                break
            print(f"{bug.id} {key} {release}: {time.monotonic() - started:.0f} s", file=sys.stderr)
        if len(got) == 2:
            runs[bug.id] = got
            print(f"{bug.id}: {table.verdict(bug, got['affected'])}; control {table.control(got['fixed'])}")
    results.save(runs)
    return 1 if failed else 0


def _table(check: bool) -> int:
    block = table.render(catalog.bugs(), results.load())
    if check:
        problem = table.check(block)
        if problem:
            print(problem, file=sys.stderr)
            return 1
        return 0
    table.DOC.write_text(table.update(table.DOC.read_text(), block))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rigs.bugs", description="the real-bug suite")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run entries on their affected and fixed releases, record them")
    run.add_argument("ids", nargs="*", help="zoo ids (S03, V01); all when none")
    run.add_argument("--engine", default="", choices=["", "sglang", "vllm"])
    show = sub.add_parser("table", help="render the table into docs/bugs.md")
    show.add_argument("--check", action="store_true", help="fail when docs/bugs.md is out of date")
    args = parser.parse_args(argv)
    try:
        return _run(args.ids, args.engine) if args.command == "run" else _table(args.check)
    except LookupError as exc:
        print(exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
