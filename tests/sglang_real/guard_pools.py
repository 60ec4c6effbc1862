"""Guard v2 on every pool of a Mamba hybrid rank, on a release's own classes (0.5.4 - 0.5.12).

Each wrong free runs in one flow three ways: the *fixed path* (the same flow without the wrong
free, guard off), guard off (the wrong free runs), guard on (it is refused).  With guard on,
SGLang's state -- what its allocators would hand out next (the free lists, in order), the request
rows, the tree's counters -- equals the fixed path's right after the wrong free and at the end,
SGLang's own idle check passes, and the only guard actions are the refusals named:

* **full KV, released row**: a finished request's KV freed again through its row after the row went
  back (a stale pointer: before 0.5.9 ``req_pool_idx`` stays set after the free);
* **Mamba, live**: the chunked request's working slot freed at a chunk boundary (the #12432 free:
  the row free's Mamba default up to 0.5.6, ``free_mamba_cache`` from 0.5.9);
* **Mamba, tree**: a finished request's slot, donated to the tree with its prefix, freed again
  through the request's stale pointer.

And a long healthy flow with guard on -- prefix sharing (copy-on-write Mamba slots), chunked
prefill, decode, an abort, a retraction and its re-admission, eviction, and on a PD prefill rank
the transfer queue -- refuses nothing and repairs nothing, and SGLang's check passes at every idle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from check_release import CONFIG, gaps, report
from guard_rig import Holder, Rig

from poolwatch.probe.lifecycle import attach, detach, install, probe_of
from poolwatch.probe.sglang.engine import SGLANG

__all__ = ["guard_pool_checks"]

Fault = Callable[[Rig, dict[str, Any]], None]


def _rig(version: str, family: str, *, guard: bool, mode: str = "null") -> Rig:
    config = replace(CONFIG, release=version)
    install(SGLANG, Holder, config)
    rig = Rig(family, mode)
    detach(rig.sched)
    attach(SGLANG, rig.sched, replace(config, guard=guard), serve=False)
    return rig


def _boundary(rig: Rig) -> Any:
    rig.sched.recv_requests()
    probe = probe_of(rig.sched)
    assert probe is not None
    return probe.latest


def _actions(rig: Rig) -> list[tuple[str, str, int, str]]:
    probe = probe_of(rig.sched)
    snap = probe.latest if probe is not None else None
    return [(r.kind.value, r.pool.value, r.count, r.hook) for r in snap.repairs] if snap else []


def _idle(rig: Rig) -> tuple[str, dict[str, int | None]]:
    rig.sched.last_batch = None
    snap = _boundary(rig)
    return rig.idle_leak(), gaps(snap)


# -- the wrong frees ---------------------------------------------------------------------------


def _released_row(rig: Rig, mark: dict[str, Any]) -> None:
    a = rig.arrive("a", list(range(40, 60)))
    rig.prefill_done(rig.prefill([a]))
    rig.decode()
    row, n = int(a.req_pool_idx), len(a.origin_input_ids) + len(a.output_ids) - 1
    rig.finish(a)
    _boundary(rig)
    if mark["fault"]:
        s = rig.sched
        s.token_to_kv_pool_allocator.free(s.req_to_token_pool.req_to_token[row, :n])
    mark["after"] = rig.state()
    x = rig.arrive("x", list(range(70, 90)))  # takes the row and, without guard, a's slots again
    rig.prefill_done(rig.prefill([x]))
    rig.decode()
    rig.finish(x)


def _chunked_slot(rig: Rig, mark: dict[str, Any]) -> None:
    s = rig.sched
    c = rig.arrive("c", list(range(200, 232)))
    for _ in range(3):
        rig.prefill([c], chunk=8)
        _boundary(rig)
        if mark["fault"] and rig.legacy:  # the #12432 step: the row free's Mamba default
            s.tree_cache.cache_unfinished_req(c, chunked=True)
            s.req_to_token_pool.free(c.req_pool_idx)
        else:
            rig.chunk_boundary()
            if mark["fault"]:
                s.req_to_token_pool.free_mamba_cache(c)
        mark.setdefault("after", rig.state())
    rig.prefill_done(rig.prefill([c], chunk=64))
    rig.decode()
    rig.finish(c)


def _tree_slot(rig: Rig, mark: dict[str, Any]) -> None:
    a = rig.arrive("a", list(range(500, 520)))
    rig.prefill_done(rig.prefill([a]))
    rig.decode()
    stale = a.mamba_pool_idx
    rig.finish(a)  # the tree keeps a's state: a's pointer is now the node's slot
    _boundary(rig)  # a census: the tree proof's index
    if mark["fault"]:
        rig.sched.req_to_token_pool.mamba_pool.free(stale.reshape(1))
    mark["after"] = rig.state()
    b = rig.arrive("b", [*range(500, 520), 9])  # hits a's cached state (copy on write)
    rig.prefill_done(rig.prefill([b]))
    rig.decode()
    rig.finish(b)
    rig.evict(tokens=64, mamba=4)


FAULTS: tuple[tuple[str, str, Fault, str], ...] = (
    ("full", "a finished request's KV freed again through its released row", _released_row, "full"),
    ("mamba", "the live chunked request's working slot freed at a chunk boundary", _chunked_slot, "mamba"),
    ("mamba", "a slot the tree holds, freed through a finished request's stale pointer", _tree_slot, "mamba"),
)


def _run(version: str, family: str, fault: Fault, *, wrong: bool, guard: bool) -> dict[str, Any]:
    rig = _rig(version, family, guard=guard, mode="prefill")
    mark: dict[str, Any] = {"fault": wrong}
    fault(rig, mark)
    leak, gap = _idle(rig)
    return {
        "after": mark.get("after"),
        "end": rig.state(),
        "leak": leak,
        "gaps": gap,
        "actions": _actions(rig),
    }


def wrong_free_checks(version: str, family: str) -> None:
    for pool, what, fault, expect in FAULTS:
        fixed = _run(version, family, fault, wrong=False, guard=False)
        off = _run(version, family, fault, wrong=True, guard=False)
        on = _run(version, family, fault, wrong=True, guard=True)
        kinds = {a[0] for a in on["actions"]}
        report(
            f"{family} {pool}: {what} -- guard off changes SGLang's state (the fixed path's differs)",
            off["after"] != fixed["after"] or off["end"] != fixed["end"] or bool(off["leak"]),
            {"leak": off["leak"][:300], "gaps": off["gaps"]},
        )
        report(
            f"{family} {pool}: {what} -- guard on refuses it: SGLang's free lists, rows and tree equal the "
            "fixed path's right after it and at the end, its idle check passes, only refusals",
            on["after"] == fixed["after"]
            and on["end"] == fixed["end"]
            and not on["leak"]
            and all(v == 0 for v in on["gaps"].values())
            and kinds == {"refuse"}
            and {a[1] for a in on["actions"]} == {expect},
            {"actions": on["actions"], "leak": on["leak"][:300], "gaps": on["gaps"]},
        )


# -- the healthy long flow -----------------------------------------------------------------------


def _round(rig: Rig, i: int, pd: bool) -> list[str]:
    s, leaks = rig.sched, []
    base = list(range(10 * (i % 3), 10 * (i % 3) + 12))  # three prompt families share prefixes
    a, b = rig.arrive(f"a{i}", [*base, 100 + i, 7]), rig.arrive(f"b{i}", [*base, 200 + i])
    rig.prefill_done(rig.prefill([a, b]))
    _boundary(rig)
    rig.decode()
    c = rig.arrive(f"c{i}", list(range(300 + i, 340 + i)))
    for _ in range(2):
        rig.prefill([c], chunk=8)
        _boundary(rig)
        rig.chunk_boundary()
    last = rig.prefill([c], chunk=64)
    if pd:  # PD prefill: the last chunk's KV is sent, then released
        s.tree_cache.cache_unfinished_req(c)
        s.disagg_prefill_inflight_queue.append(c)
        _boundary(rig)
        s.disagg_prefill_inflight_queue.remove(c)
        rig.finish(c)
    else:
        rig.prefill_done(last)
    rig.decode()
    _boundary(rig)
    rig.finish(a, abort=i % 2 == 0)
    rig.retract(b)
    s.waiting_queue.remove(b)
    if not rig.legacy:  # up to 0.5.6 a retracted hybrid request keeps its stale row: SGLang's own
        rig.prefill_done(rig.prefill([b]))  # match_prefix asserts on it, so it is not re-admitted
    rig.decode()
    _boundary(rig)
    for req in list(s.running_batch.reqs):
        rig.finish(req)
    if i % 2:
        rig.evict(tokens=24, mamba=2)
    leak, _ = _idle(rig)
    return [leak] if leak else leaks


def healthy_checks(version: str, family: str, rounds: int = 12) -> None:
    for mode in ("null", "prefill"):
        rig = _rig(version, family, guard=True, mode=mode)
        leaks = [leak for i in range(rounds) for leak in _round(rig, i, mode == "prefill")]
        _, gap = _idle(rig)
        probe = probe_of(rig.sched)
        refuser = probe.refuser if probe is not None else None
        report(
            f"{family} {mode} rank, guard on, {rounds} rounds of prefix sharing, chunked prefill, decode, "
            "abort, retraction, eviction: zero refusals, zero repairs, SGLang's idle check passes every time",
            refuser is not None
            and refuser.kv is not None
            and refuser.mamba is not None
            and refuser.refused == 0
            and _actions(rig) == []
            and leaks == []
            and all(v == 0 for v in gap.values()),
            {"actions": _actions(rig), "leaks": leaks[:2], "gaps": gap, "wrapped": refuser is not None},
        )


def guard_pool_checks(version: str, family: str) -> None:
    healthy_checks(version, family)
    wrong_free_checks(version, family)
