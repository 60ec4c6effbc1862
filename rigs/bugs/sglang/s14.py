"""S14: HiCache's write-through locks are never released while the scheduler only decodes (PR #20049).

With ``--enable-hierarchical-cache`` and the write-through policy, every node the tree takes in (a
prompt at its prefill, a finished request's sequence) is copied to host and locked until the copy
is acknowledged; the lock is dropped only when ``writing_check`` processes the acknowledgements.
On 0.5.9 that happens only in the prefill batch builder, past its early return for an empty
waiting queue: while no request arrives, the scheduler decodes, the acknowledgements pile up in
``cache_controller.ack_write_queue`` and the nodes stay locked -- ``protected`` with no live
locker, the books balanced.  The running requests grow into a pool whose cached prefixes can no
longer be evicted, until SGLang raises "Out of memory even after retracting all other requests in
the decode batch".  0.5.10 drains the acknowledgements in every ``update_running_batch`` (and
before the prefill builder's early return).

The entry runs the release's own ``HiRadixCache`` and ``HiCacheController`` (the copy stood in for:
it finishes within the step) and the release's own ``get_next_batch_to_run`` (the prefill builder,
``update_running_batch``, ``check_decode_mem``, ``retract_decode``) on a dense rank
(:mod:`rigs.sglang.hicache`): four requests are prefilled together, three short ones finish while
the long one decodes on, and nothing else arrives.  The probe runs on the engine's clock
(:data:`~rigs.timeline.Timeline.seconds_per_step` an engine step), so the locks age in steps; SGLang
has no bound on this wait, so the detector's default applies (600 s): on 0.5.9 PoolwatchStrandedHold
pages when the first locks turn 600 s old, naming the locked nodes, before SGLang's own signal (its
decode out of memory, once the long request has filled what the locks left); on 0.5.10 the long
request finishes, the locks drained turn by turn.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S14",
    engine="sglang",
    title="HiCache write-through locks are never released while the scheduler only decodes",
    issue="https://github.com/sgl-project/sglang/pull/20049",
    fix="https://github.com/sgl-project/sglang/pull/20049",
    bug_class="stranded",
    affected="0.5.9",
    fixed="0.5.10",
    trigger="requests finish while the scheduler only decodes, HiCache on with its write-through policy",
)

KV = 8192  # the device pool (slots)
LONG = (100, 8000)  # the long request: prompt, output (it fits the pool once the tree can evict)
SHORT = ((300, 16), (300, 24), (300, 32))  # the short ones, finished while the long one decodes
IDLE_TURNS = 3  # idle loop turns after the last request finished
SERVER = {"enable_hierarchical_cache": True, "hicache_write_policy": "write_through"}


def run(release: str) -> dict[str, Any]:
    from rigs.bugs.sglang.flows import idle
    from rigs.sglang.driver import Driver
    from rigs.sglang.server_args import DENSE
    from rigs.timeline import Timeline

    timeline = Timeline()
    d = Driver(release, timeline=timeline)
    d.new("null", kv=KV, rows=8, context=LONG[0] + LONG[1] + 8, dense="hiradix",
          server={**SERVER, "model_path": str(DENSE)})  # fmt: skip
    d.engine_clock()
    d.open_hicache()
    long = d.arrive("long", [1000 + i for i in range(LONG[0])], max_new=LONG[1])
    short = [
        d.arrive(f"short{i}", [(i + 2) * 1000 + j for j in range(n)], max_new=out)
        for i, (n, out) in enumerate(SHORT)
    ]
    d.serve([long, *short])  # the prefill turn: the prompts written through, locked until acked
    d.loop()
    _decode(d, timeline, long)
    if long.finished():  # the loop goes idle: its turns find nothing to run, then SGLang's check
        for _ in range(IDLE_TURNS):
            d.decode_turn()
        idle(d)
    tree = d.sched.tree_cache
    extra = {
        "protected_end": int(tree.protected_size()),  # the locked slots SGLang counts at the end
        "evictable_end": int(tree.evictable_size()),
        "long_finished": long.finished(),
        "acked_locked": len(_acked(tree)),
        "tree_lock_hold": _hold(d.probe.latest),
    }
    return outcome(release, timeline.wrong_act is not None, {**timeline.row(), **extra})


def _decode(d: Any, timeline: Any, long: Any) -> None:
    """Decode turns until the long request finishes or SGLang runs out of memory (its signal);
    the wrong act is a turn of the scheduler that leaves locks acknowledged before it in place."""
    tree = d.sched.tree_cache
    while not long.finished():
        before = set(_acked(tree))
        try:
            d.decode_turn()
        except (ValueError, RuntimeError) as exc:  # SGLang's decode out of memory
            timeline.engine_said(d.steps + 1, str(exc).strip().splitlines()[0][:200])
            break
        left = before & set(_acked(tree))
        if left and timeline.wrong_act is None:
            slots = sum(len(tree.ongoing_write_through[i].value) for i in left)
            timeline.wrong(
                d.steps, f"a decode turn leaves {len(left)} acknowledged write-through locks ({slots} slots)"
            )


def _hold(snap: Any) -> list[Any] | None:
    """The probe's last ``tree_lock`` hold: [owners, slots, the oldest owners named]."""
    from poolwatch.model.holds import HoldReason

    holds = [h for h in (snap.holds if snap is not None else ()) if h.reason is HoldReason.TREE_LOCK]
    return [holds[0].owners, holds[0].slots, [n.owner for n in holds[0].named[:4]]] if holds else None


def _acked(tree: Any) -> list[int]:
    """Nodes still locked by their write-through whose copy the controller already acknowledged."""
    done = {i for ack in tree.cache_controller.ack_write_queue for i in ack.node_ids}
    return sorted(i for i, node in tree.ongoing_write_through.items() if i in done and node.lock_ref > 0)
