"""A healthy chunked prefill on one release's own classes balances every pool while its tree caches
each chunk, and the probe reads the release's own hybrid flags.

0.5.6's ``MambaRadixCache`` keeps a request's tree part in ``prefix_indices`` and leaves
``cache_protected_len`` at its first match (its plain radix cache moves both): read as the radix
cache is, every cached chunk was a false surplus of its length on the full pool.
"""

from __future__ import annotations

from poolwatch.conservation import Balance, findings
from rigs.checks import report
from rigs.sglang.driver import Driver


def tree_balance_checks(driver: Driver) -> None:
    sched = driver.new("null", guard=False)
    shape = driver.probe.reader.shape  # type: ignore[attr-defined]
    report(
        "the probe reads the release's own hybrid flags",
        all(hasattr(sched, flag) for flag in shape.hybrid_flags),
        {"flags": shape.hybrid_flags, "tree": type(sched.tree_cache).__name__},
    )
    req = driver.arrive("c", list(range(200, 240)))
    driver.prefill([req], chunk=8)
    sched.tree_cache.cache_unfinished_req(req)  # what the scheduler does as each chunk completes
    snap = driver.probe.sample_now(census=True)
    assert snap is not None
    gaps = {pool.value: found.gap for pool, found in findings(snap).items()}
    balanced = all(found.balance is Balance.BALANCED for found in findings(snap).values())
    report(
        "a chunk the tree cached leaves every pool balanced",
        balanced,
        {"gaps": gaps, "held_rule": shape.held_rule.value},
    )
