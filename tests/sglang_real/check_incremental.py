"""A randomized run on one real SGLang release's classes: at every step, the probe's incremental
sample (the live set and the ledger kept from the last sample) reads the very pools a fresh read
finds.

Run inside the release's venv (``python -m tests.sglang_real.check_incremental 0.5.23``): one rank
of :class:`rigs.sglang.driver.Driver` on the release's own pools, tree and ``Req`` objects, small
enough that admissions evict the tree; at each step requests arrive and are admitted whole or in
chunks (the chunked request continued across steps, its chunk handed to the tree at each boundary),
decode, finish, are aborted or retracted, and a few KV slots are sometimes taken from the pool by no
one (a leak, so the figures are compared with a gap as well as without).  After every step the
incremental sample's accounts (every term of every pool) must equal a fresh sample's, and the ledger
must have recomputed fewer requests than it read.  One JSON line per seed; exit code = failures.
"""

from __future__ import annotations

import functools
import random
import sys
from typing import Any

from rigs.checks import failures, report, run
from rigs.sglang.driver import Driver
from rigs.sglang.rank import Batch

SEEDS = (1, 2, 3)
STEPS = 160


def _sample(d: Driver, memo: Any) -> Any:
    from poolwatch.probe.core.reading import Reading
    from poolwatch.probe.sglang.snapshot import take_sample

    shape = d.probe.reader.shape  # type: ignore[attr-defined]  # (the SGLang room's reader)
    return take_sample(d.sched, shape, Reading(), memo=memo).pools


class Run:
    """One seed's moves on a fresh rank."""

    def __init__(self, d: Driver, seed: int) -> None:
        self.d, self.rng = d, random.Random(seed)
        d.new(kv=6_000, mamba=80, rows=40, context=1_024)
        self.running: list[Any] = []
        self.chunked: Any = None
        self.made = 0

    def _prompt(self) -> list[int]:
        shared = list(range(100, 100 + self.rng.choice((0, 32, 64))))  # prefix hits in the tree
        return shared + [self.rng.randrange(10, 900) for _ in range(self.rng.randrange(8, 120))]

    def _arrive(self) -> Any:
        self.made += 1
        return self.d.arrive(f"r{self.made}", self._prompt(), self.rng.randrange(2, 40))

    def _chunk(self) -> None:
        d = self.d
        if self.chunked is None:
            req = self._arrive()
        else:
            req = self.chunked
            d.chunk_boundary()
        batch = d.prefill([req], chunk=16)
        self.chunked = d.sched.chunked_req
        if self.chunked is None:  # its last chunk (or a prompt one chunk holds): it runs
            d.prefill_done(batch)
            self.running.append(req)

    def step(self) -> None:
        """One turn in SGLang's order: the loop head (where the probe samples), admissions, the
        forward, then the results: finished and aborted requests are released but stay in the batch
        that just ran until the next turn filters it (so the sample sees them with their figures
        changed in place), a retracted one may be admitted again at once (the same request, a new
        row and prefix)."""
        d, rng = self.d, self.rng
        d.loop()
        if len(self.running) < 24 and rng.random() < 0.6:
            req = self._arrive()
            d.admit(req)
            self.running.append(req)
        if self.chunked is not None or rng.random() < 0.15:
            self._chunk()
        if self.running:
            d.decode()
            self._results()

    def _results(self) -> None:
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        d, rng = self.d, self.rng
        d.sched.last_batch = Batch(d.sched.running_batch.reqs, ForwardMode.DECODE)  # the batch that ran
        done = [r for r in self.running if len(r.output_ids) >= r.sampling_params.max_new_tokens]
        if self.running and rng.random() < 0.1:
            done.append(rng.choice(self.running))
        for req in dict.fromkeys(done):
            self.running.remove(req)
            d.finish(req, abort=req.finished_reason is None and len(req.output_ids) < 2)
        if self.running and rng.random() < 0.08:
            req = self.running.pop(rng.randrange(len(self.running)))
            d.retract(req)
            d.sched.waiting_queue.remove(req)
            cleared = getattr(req, "req_pool_idx", None) is None  # (0.5.4 leaves it set: no re-match)
            if cleared and rng.random() < 0.5:  # admitted again at once: the same request, moved
                d.admit(req)
                self.running.append(req)
        if rng.random() < 0.1:
            d.sched.token_to_kv_pool_allocator.alloc(rng.randrange(1, 4))  # taken by no one


def check(d: Driver, seed: int) -> None:
    from poolwatch.probe.sglang.totals import Memo

    r, memo = Run(d, seed), Memo()
    unequal: list[Any] = []
    read = 0
    for step in range(STEPS):
        r.step()
        kept, fresh = _sample(d, memo), _sample(d, None)
        read += len(memo.groups[2]) if memo.groups is not None else 0
        if kept != fresh and len(unequal) < 3:
            unequal.append({"step": step, "incremental": repr(kept), "fresh": repr(fresh)})
    recomputed = memo.ledger.recomputed
    report(
        f"the incremental sample equals a fresh read at every step (seed {seed})",
        not unequal and 0 < recomputed < read / 2,
        {"unequal": unequal, "recomputed": recomputed, "read": read, "made": r.made},
    )


def main(argv: list[str]) -> int:
    d = Driver(argv[0])
    for seed in SEEDS:
        run(f"incremental, seed {seed}", functools.partial(check, d, seed))
    return failures()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
