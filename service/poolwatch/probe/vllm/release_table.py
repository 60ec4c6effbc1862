"""The release table of ``docs/engines/vllm.md``, generated from :data:`~poolwatch.probe.vllm.shapes.SHAPES`
(the same data the readers consult), so the docs cannot say what the probe does not do.  Stdlib only:
``poolwatch generate`` runs it where vLLM is not installed."""

from __future__ import annotations

from poolwatch.probe.vllm.shapes import READ, SHAPES, Version, VllmShape

__all__ = ["markdown", "summary"]

_READS = (  # what a family's flag makes the probe read, in the table's words
    ("deferred_frees", "`deferred_frees` entries own their blocks"),
    ("cow", "copy-on-write retentions own one reference each"),
    ("tail_pins", "`_partial_tail_pins` own their blocks"),
    ("sink_blocks", "sink blocks reserved off the queue"),
    ("single_pass_free", "one-pass `free_blocks`"),
    ("null_counted", "the null block's `ref_cnt` stays 0"),
    ("hisparse", "HiSparse managers: coarse while they list blocks"),
)


def _name(version: Version) -> str:
    return ".".join(map(str, version))


def _runs(versions: list[Version]) -> str:
    """Releases as runs of one minor series: ``0.11.0 to 0.11.2, 0.12.0``."""
    runs: list[list[Version]] = []
    for v in sorted(versions):
        if runs and runs[-1][-1][:2] == v[:2]:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(_name(r[0]) if len(r) == 1 else f"{_name(r[0])} to {_name(r[-1])}" for r in runs)


def _members(shape: VllmShape, after: VllmShape | None) -> list[Version]:
    return [v for v in READ if shape.low <= v and (after is None or v < after.low)]


def _reads(shape: VllmShape) -> str:
    parts = ["queues " + ", ".join(f"`{q}`" for q in shape.queues)]
    parts += [text for flag, text in _READS if getattr(shape, flag)]
    if shape.block_pool_ref:
        parts.append(f"`KVCacheBlock.pool` ({shape.block_pool_ref})")
    if shape.dp_index:
        parts.append("DP rank from `data_parallel_index`")
    return "; ".join(parts)


def markdown() -> str:
    """The table (one row per family) and what happens to a release outside it."""
    rows = ["| family | releases read | what the probe reads there | what changed |", "|---|---|---|---|"]
    for shape, after in zip(SHAPES, (*SHAPES[1:], None), strict=True):
        members = _runs(_members(shape, after))
        rows.append(f"| `{shape.family}` | {members} | {_reads(shape)} | {shape.note} |")
    count, first, newest = len(READ), _name(SHAPES[0].low), _name(max(READ))
    rows += [
        "",
        f"{count} releases read, {first} to {newest}, final releases only. A release not read (newer than "
        f"{newest}, a patch release not listed, or any pre-release, development or local build: "
        "`0.34.0rc1`, `0.33.0.dev12+g1a2b`, `0.33.0+cu128`) is read as the newest family not newer than "
        "it, *unverified*: coarse until the shape check passes and the first idle census balances, its "
        "frees judged against their owners only once 16 in a row were announced by a pop, guard off. "
        f"One older than {first} is refused. `POOLWATCH_ENGINE_VERSION` chooses the family a build is "
        "read as, never that it was read; a value that is no release number (PEP 440) keeps the probe off.",
    ]
    return "\n".join(rows)


def summary() -> str:
    """The releases read, in one line (the README's engines table)."""
    first, newest = _name(SHAPES[0].low), _name(max(READ))
    return (
        f"V1, {first} to {newest} ({len(READ)} releases read); a newer release is read as the newest family "
        f"not newer than it, *unverified*; one older than {first} is refused"
    )
