"""Guard mode against a real SGLang release: its own PD prefill chunk flow, its own idle check.

Three long prompts are prefilled in chunks through SGLang's real ``process_prefill_chunk`` (on
0.5.4.post1 it frees the chunked request's row with ``free_mamba_cache=True``: the seed bug), a
short request is admitted after every chunk boundary (it takes a Mamba slot from the free list),
and after each long prompt is transferred and released the rank goes idle and SGLang's own strict
check runs.  The same flow runs with the probe's guard off and on:

* guard off: unchanged behaviour -- SGLang's idle check raises after the first long prompt;
* guard on: the check passes at every idle moment, no two live requests ever hold the same Mamba
  slot, every pool balances exactly afterwards, and each repair is a quarantine named after
  ``process_prefill_chunk``;
* on a fixed release the same flow performs zero repairs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from check_release import CONFIG, gaps, report

from poolwatch.probe.sglang.hooks import attach, detach, probe_of

__all__ = ["guard_checks"]


def _mamba_ids(req: Any) -> list[int]:
    idx = getattr(req, "mamba_pool_idx", None)
    return [] if idx is None else [int(i) for i in idx.reshape(-1).tolist()]


def _shared(driver: Any, live: list[Any]) -> list[tuple[int, list[str]]]:
    held: dict[int, list[str]] = {}
    for req in live:
        if not req.finished():
            for slot in _mamba_ids(req):
                held.setdefault(slot, []).append(req.rid)
    return [(s, rids) for s, rids in sorted(held.items()) if len(rids) > 1]


def run_flow(driver: Any, *, guard: bool, strict_check: Any, chunk_step: Any) -> dict[str, Any]:
    """The flow on a fresh prefill holder; returns what happened."""
    s = driver.new("prefill")
    detach(s)
    attach(s, replace(CONFIG, guard=guard), serve=False)
    out: dict[str, Any] = {"idle_passed": 0, "raised": "", "shared": [], "shorts": 0}
    for i in range(3):
        c = driver.arrive(f"long{i}", list(range(300 + 40 * i, 330 + 40 * i)))
        shorts: list[Any] = []
        for k in range(3):
            driver.prefill([c], chunk=8)
            driver.boundary()
            chunk_step()
            x = driver.arrive(f"short{i}.{k}", [900 + 10 * i + k, 7, 7, 7])
            driver.prefill_done(driver.prefill([x]))
            shorts.append(x)
            out["shared"] += _shared(driver, [c, *shorts])
        driver.prefill([c], chunk=64)
        s.tree_cache.cache_unfinished_req(c)
        s.disagg_prefill_inflight_queue.append(c)
        driver.boundary()
        s.disagg_prefill_inflight_queue.remove(c)
        driver.finish_transferred(c)
        for x in shorts:
            driver.finish(x)
        out["shorts"] += len(shorts)
        s.last_batch = None
        snap = driver.boundary()
        out["gaps"] = gaps(snap)
        try:
            strict_check()
        except ValueError as exc:
            out["raised"] = str(exc)
            break
        out["idle_passed"] += 1
    probe = probe_of(s)
    snap = probe.latest if probe is not None else None
    out["repairs"] = [(r.kind.value, r.pool.value, r.count, r.hook) for r in snap.repairs] if snap else []
    out["tripwires"] = [str(t) for t in snap.tripwires] if snap else []
    return out


def guard_checks(driver: Any, *, buggy: bool, strict_check: Any, chunk_step: Any) -> None:
    """Report the guard-off and guard-on runs of the flow (``buggy``: the release has #12432)."""
    off = run_flow(driver, guard=False, strict_check=strict_check, chunk_step=chunk_step)
    on = run_flow(driver, guard=True, strict_check=strict_check, chunk_step=chunk_step)
    if buggy:
        report(
            "guard off: SGLang's own idle check raises, as without poolwatch",
            bool(off["raised"]) and "mamba_available_size" in off["raised"] and off["idle_passed"] == 0,
            {k: off[k] for k in ("raised", "idle_passed", "repairs")},
        )
    kinds = {k for k, _, _, _ in on["repairs"]}
    report(
        "guard on: SGLang's idle check passes at every idle moment, no Mamba slot is ever shared",
        on["idle_passed"] == 3 and not on["raised"] and on["shared"] == [],
        {k: on[k] for k in ("idle_passed", "raised", "shared", "repairs")},
    )
    report(
        "guard on: conservation is exact afterwards and nothing is left unrepaired",
        all(v == 0 for v in on["gaps"].values()) and on["tripwires"] == [],
        {"gaps": on["gaps"], "tripwires": on["tripwires"]},
    )
    if buggy:
        report(
            "guard on: every repair is a Mamba quarantine right after process_prefill_chunk",
            kinds == {"quarantine"} and all(h == "process_prefill_chunk" for _, _, _, h in on["repairs"]),
            on["repairs"],
        )
    else:
        report("guard on a fixed release: zero repairs", on["repairs"] == [], on["repairs"])
