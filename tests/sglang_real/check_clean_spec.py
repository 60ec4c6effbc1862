"""``clean_spec``: a long clean run of a dense rank with EAGLE speculative decoding (spec v2), judged
as ``check_clean``'s workloads are (issue 39: no false alarm on the clean long runs, speculative
decoding among them).

The rank's pools are the release's own (:mod:`rigs.sglang.spec`: its ``ReqToTokenPool``, its KV
allocator -- paged at page 4, the plain one at page 1, as SGLang picks -- and the tree of
``--disable-radix-cache``, ``ChunkCache`` or 0.5.23's disabled ``UnifiedRadixCache``, which shares
no prefix: the tree a spec rank runs here).  Requests arrive every third turn with prompts of 5 - 60
tokens and 4 - 64 new tokens, every fourth as many as the context leaves (:data:`LONG`: its
over-allocation reaches the row's end, past which the census reads); a turn prefills one while
fewer than :data:`~tests.sglang_real.clean_traffic.MAX_RUNNING` run, else decodes every running
request through the release's own spec path (``Release.spec``) -- topping each up past its
committed KV: on 0.5.5.post3 ``EagleDraftInput.prepare_for_decode`` over the draft input's
``allocate_lens``, to ``seq_lens + 4``; on 0.5.6 - 0.5.13 the same method over the request's
``kv_allocated_len``, to ``kv_committed_len + 2 * get_alloc_len_per_decode``, at page 4 not to a
page end; from 0.5.17 ``spec_prepare_for_decode`` -> ``alloc_for_spec_decode`` over ``req.kv``,
the same reserve rounded up to the page end -- and 1 - 4 tokens accepted per request; a request at
its length, or the last one every 23 turns (an abort), goes through the release's
``release_kv_cache``.  Each page size is its own rank and timeline (:data:`PAGES`),
:data:`~tests.sglang_real.clean_traffic.STEPS` busy turns each, then drained and idle.  0.5.4.post1
records no allocated length, so it has no spec path to drive (said as skipped: :func:`why_not`).
"""

from __future__ import annotations

import random
from typing import Any

from rigs.sglang.driver import Driver
from rigs.timeline import Timeline
from tests.sglang_real.clean_traffic import MAX_RUNNING, STEPS, idle_check, started

PAGES = (4, 1)  # the page sizes, a rank each
KV, ROWS = 2048, 16  # 8 running requests take at most ~1,400 KV slots: none waits for room
CONTEXT = 160  # the model's context length: a request's prompt and new tokens stay within it
WIDTH = CONTEXT + 4 + 4  # a row: SGLang's context + 4 + the draft tokens (extra_max_context_len)
LONG = 4  # every LONG-th request runs to the context's end: its over-allocation reaches the row's end


def why_not(version: str) -> str:
    """Why the rig cannot run spec v2 on ``version`` ('' where it can: the release's row names a
    spec path, :class:`~rigs.sglang.releases.SpecPath`)."""
    from rigs.sglang.releases import SpecPath, release

    if release(version).spec is SpecPath.NONE:
        return f"{version} records no kv_allocated_len: spec v2's over-allocation has nowhere to go"
    return ""


class Spec:
    """One spec rank's traffic: the requests waiting (prompt length, new tokens) and the counts."""

    def __init__(self, d: Driver, seed: int) -> None:
        self.d, self.rng = d, random.Random(seed)
        self.waiting: list[tuple[int, int]] = []
        self.made = self.finished = self.aborted = self.unaligned = self.tokens = self.furthest = 0

    def arrive(self) -> None:
        """A prompt of 5 - 60 tokens asking 4 - 64 new ones, or (every :data:`LONG`-th) as many as
        the context leaves room for, less a step's 3 surplus accepted tokens: its committed KV ends
        within the context, its over-allocation up to the row's end."""
        prompt, long = self.rng.randrange(5, 61), len(self.waiting) + self.made + 1
        new = CONTEXT - 4 - prompt if long % LONG == 0 else self.rng.randrange(4, 65)
        self.waiting.append((prompt, new))

    def prefill(self) -> None:
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        from rigs.sglang.pieces import Batch
        from rigs.sglang.spec import prefilled

        s, (n, new) = self.d.sched, self.waiting.pop(0)
        self.made += 1
        req = prefilled(s, self.d.release, f"r{self.made}", n)
        req.sampling_params.max_new_tokens = new
        s.last_batch = Batch([req], ForwardMode.EXTEND)
        s.running_batch.reqs.append(req)
        s.forward_ct += 1

    def decode(self) -> None:
        from rigs.sglang.spec import allocated, spec_step

        s = self.d.sched
        running = s.running_batch.reqs
        before = sum(len(r.output_ids) for r in running)
        spec_step(s, self.d.release, running, self.rng)
        self.tokens += sum(len(r.output_ids) for r in running) - before
        lengths = [allocated(self.d.release, r) for r in running]
        self.unaligned += sum(1 for n in lengths if n % s.page_size)
        self.furthest = max([self.furthest, *lengths])
        s.last_batch, s.forward_ct = s.running_batch, s.forward_ct + 1
        for req in [r for r in running if len(r.output_ids) >= r.sampling_params.max_new_tokens]:
            self.release(req)

    def release(self, req: Any, *, abort: bool = False) -> None:
        from rigs.sglang.spec import release

        release(self.d.sched, self.d.release, req, abort=abort)
        self.d.sched.running_batch.reqs.remove(req)
        self.aborted += abort
        self.finished += not abort

    def turn(self) -> None:
        """A prefill turn while a request waits and fewer than MAX_RUNNING run, else a decode turn."""
        running = self.d.sched.running_batch.reqs
        if self.waiting and len(running) < MAX_RUNNING:
            self.prefill()
        elif running:
            self.decode()

    def figures(self) -> dict[str, int]:
        return {
            "arrived": self.made, "finished": self.finished, "aborted": self.aborted,
            "accepted_tokens": self.tokens, "unaligned_allocations": self.unaligned,
            "max_kv_allocated_len": self.furthest, "row_width": WIDTH,
        }  # fmt: skip


def one_rank(version: str, page: int) -> tuple[Timeline, dict[str, Any]]:
    """:data:`STEPS` busy turns on a spec rank at ``page``, drained, idle, SGLang's own check."""
    d, timeline = started(version, "null", kv=KV, rows=ROWS, context=WIDTH, paged=page)
    spec = Spec(d, seed=page)
    for turn in range(STEPS):
        if turn % 3 == 0:
            spec.arrive()
        spec.turn()
        running = d.sched.running_batch.reqs
        if turn % 23 == 11 and len(running) > 1:
            spec.release(running[-1], abort=True)
        d.loop()
    while spec.waiting or d.sched.running_batch.reqs:
        spec.turn()
        d.loop()
    d.sched.last_batch = None
    for _ in range(3):
        d.loop()
    free = d.sched.token_to_kv_pool_allocator.available_size()
    ran = {"turns": d.steps, **spec.figures(), "kv_free_end": int(free), "sglang_idle_check": idle_check(d)}
    return timeline, ran


def spec(version: str) -> tuple[Timeline, dict[str, Any]]:
    """The run at each of :data:`PAGES` (a release :func:`why_not` names no reason against): the
    first rank's timeline unless a later one found or alerted, every rank's figures."""
    from tests.sglang_real.clean_traffic import guarded

    runs = {page: one_rank(version, page) for page in PAGES}
    loud = [t for t, _ in runs.values() if t.finding is not None or t.alerts]
    figures: dict[str, Any] = {}
    for page, (t, ran) in runs.items():
        row = t.row()
        figures[f"page_{page}"] = {**ran, **{k: row[k] for k in ("snapshots", "finding", "alerts")}}
    said = [ran["sglang_idle_check"] for _, ran in runs.values() if ran["sglang_idle_check"] != "passed"]
    figures["turns"] = min(ran["turns"] for _, ran in runs.values())
    figures["guard"] = guarded(version)
    figures["sglang_idle_check"] = (said or ["passed"])[0]
    return (loud or [runs[PAGES[0]][0]])[0], figures
