"""What the vLLM entries share: the probe as deployed with every hook sampling, the engine started
with it, what vLLM's own state says (the ground truth an entry marks its wrong act from: the free
queue walked, a request's blocks), a P/D hand-off's parameters, a fix applied as the control, and
the entry's record.  Stdlib at the top, as an entry (:mod:`rigs.bugs.entry`): the engine, the
driver and the probe are imported when a run calls for them, inside the release venv."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from rigs.bugs.entry import FIX_SUFFIX, outcome

if TYPE_CHECKING:
    from rigs.timeline import Timeline
    from rigs.vllm.engine import Engine

__all__ = [
    "affected",
    "blocks_of",
    "free_queue",
    "patched",
    "record",
    "remote_prefill",
    "started",
]


def affected(release: str) -> bool:
    """Whether ``release`` runs as released (not the affected release with the fix applied)."""
    return not release.endswith(FIX_SUFFIX)


def started(
    blocks: int, *, seconds_per_step: float = 0.1, guard: bool = False, **engine: Any
) -> tuple[Engine, Timeline]:
    """vLLM's scheduler of this venv's release with the probe attached as deployed (guard off
    unless ``guard``) -- every hook sampling and every census due, so the timeline sees each step
    (deployed: ``ProbeConfig.from_env``) -- and the timeline every step is recorded on, each step
    ``seconds_per_step`` of its clock."""
    from poolwatch.probe.core.config import ProbeConfig
    from rigs.timeline import Timeline
    from rigs.vllm.engine import Engine

    timeline = Timeline(seconds_per_step=seconds_per_step)
    e = Engine(blocks, timeline=timeline, **engine)
    e.attach(
        ProbeConfig(
            sample_interval_s=0.0,
            census_interval_s=0.0,
            kv_census_interval_s=0.0,
            idle_kv_census_gap_s=0.0,
            serve=False,
            directory="/nonexistent-poolwatch-dir",
            guard=guard,
        )
    )
    return e, timeline


def free_queue(pool: Any) -> list[int]:
    """The block ids on vLLM's free queue, walked from its head (what its counter should count)."""
    queue = pool.free_block_queue
    out: list[int] = []
    node = queue.fake_free_list_head.next_free_block
    while node is not None and node is not queue.fake_free_list_tail and len(out) <= 4 * len(pool.blocks):
        out.append(node.block_id)
        node = node.next_free_block
    return out


def blocks_of(sched: Any, rid: str) -> set[int]:
    """The (non-null) block ids ``rid`` holds in every KV cache group."""
    managers = sched.kv_cache_manager.coordinator.single_type_managers
    return {b.block_id for m in managers for b in m.req_to_blocks.get(rid, ()) if not b.is_null}


def remote_prefill(rid: str, blocks: int) -> dict[str, Any]:
    """A decode request's ``kv_transfer_params``: its KV comes from a remote prefill (vLLM's unit
    tests' shape)."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "prefill-0",
        "remote_request_id": f"p-{rid}",
        "remote_block_ids": list(range(blocks)),
        "remote_host": "127.0.0.1",
        "remote_port": 5600,
        "tp_size": 1,
    }


@contextlib.contextmanager
def patched(owner: Any, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    """``owner.name`` replaced by ``make(original)`` for the run (a fix applied as the control)."""
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def record(timeline: Timeline, release: str, **more: Any) -> dict[str, Any]:
    """The entry's row (:func:`rigs.bugs.entry.outcome`): the bug struck when its wrong act was
    seen; ``more``: what the entry measured of vLLM's own state."""
    return {**outcome(release, timeline.wrong_act is not None, timeline.row()), **more}
