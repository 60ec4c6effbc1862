"""The release-family table of ``docs/engines/sglang.md``, generated from
:data:`~poolwatch.probe.sglang.shapes.SHAPES` (the same data the readers consult).  Stdlib only."""

from __future__ import annotations

from poolwatch.probe.sglang.shapes import NEWEST_RELEASE, SHAPES, HeldRule, Shape

__all__ = ["markdown", "summary"]

_HELD = {
    HeldRule.SEQLEN: "`seqlen - 1` allocated (`fill_ids` while chunked), less the prefix",
    HeldRule.ALLOCATED_PREFIX: "`kv_allocated_len - len(prefix_indices)`",
    HeldRule.ALLOCATED_PROTECTED: "`kv_allocated_len - cache_protected_len`",
    HeldRule.KV_LENGTHS: "`req.kv.kv_allocated_len - cache_protected_len` (`req.kv` None once freed)",
    HeldRule.REQ_KV: "the same, under `req.kv`",
}


def _version(parts: tuple[int, ...]) -> str:
    base, post = ".".join(map(str, parts[:3])), parts[3:4]
    return f"{base}.post{post[0]}" if post and post[0] else base


def _row(shape: Shape) -> str:
    ids = "0..size-1" if shape.mamba_first_id == 0 else f"{shape.mamba_first_id}..size"
    rows = "0..size-1" if shape.req_first_row == 0 else f"{shape.req_first_row}..size"
    free_list = "`mamba_allocator`" if shape.mamba_allocator else "`mamba_pool`"
    flags = "/".join(f"`{f}`" for f in shape.hybrid_flags)
    extras = [
        "stale pointers cleared" if shape.row_pointer_cleared else "stale pointers stay set",
        "session-held" if shape.has_session_held else "",
        "ping-pong slots" if shape.has_ping_pong else "",
    ]
    hooks = f"`{shape.loop_hook}`, `{shape.idle_hook}`"
    held = _HELD[shape.held_rule] + "".join(
        f"; {_HELD[HeldRule.ALLOCATED_PREFIX]} under `{tree}`" for tree in shape.prefix_trees
    )
    return (
        f"| {shape.family} | {ids} ({free_list}) | {rows} | {held} | {flags} | {hooks} "
        f"| {', '.join(e for e in extras if e)} |"
    )


def markdown() -> str:
    """One row per family, and what happens to a release outside them."""
    head = [
        "| family | Mamba ids (free list) | request rows | a request's private KV | hybrid flags "
        "| hooks (loop, idle) | also |",
        "|---|---|---|---|---|---|---|",
    ]
    newest = _version(NEWEST_RELEASE)
    tail = [
        "",
        f"A version maps to the newest family not newer than it. One newer than {newest} (or unreadable), "
        "and any pre-release, development or local build (`0.5.9rc1`, `0.5.10.dev3+g1a2b`, `0.5.9+rocm`), "
        f'is read as its family *unverified*: guard\'s "return" and refusals stay off there. '
        "`POOLWATCH_ENGINE_VERSION` chooses the family a build is read as, never that it was read; "
        "a value that is no release number (PEP 440) keeps the probe off.",
    ]
    return "\n".join([*head, *map(_row, SHAPES), *tail])


def summary() -> str:
    """The releases read, in one line (the README's engines table)."""
    first, newest = _version(SHAPES[0].since), _version(NEWEST_RELEASE)
    return (
        f"{first} to {newest}, every release family ({len(SHAPES)}); a newer release is read as the newest "
        "family, *unverified*"
    )
