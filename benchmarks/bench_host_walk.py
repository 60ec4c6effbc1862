"""The cost of the HiCache ``host`` account: one walk of the prefix tree per sample.

:func:`poolwatch.probe.sglang.host_census.host_account` reads ``len(free_slots)`` and sums
``len(node.host_value)`` over every tree node (split by the host lock).  This times that read on
trees of the emulator's ``TreeNode`` (the same attributes as SGLang's) of 1,000 to 100,000 nodes,
each node backed up to host memory with 16 slots and a branching factor of 4, and prints the
median of ``--repeat`` reads and the share of the scheduler thread it takes at the probe's default
sample interval (0.1 s).

Run: ``python benchmarks/bench_host_walk.py [--repeat 21]``.  Figures, never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace
from typing import Any

import torch

from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.host_census import host_account
from poolwatch_emulator.hicache import HostKVCache
from poolwatch_emulator.radix import TreeNode

SIZES = (1_000, 10_000, 100_000)
SAMPLE_INTERVAL_S = 0.1


def tree(nodes: int, per_node: int = 16) -> tuple[Any, HostKVCache]:
    host = HostKVCache(nodes * per_node * 2, 1)
    root = TreeNode()
    level, made = [root], 0
    while made < nodes:
        parent = level.pop(0)
        for k in range(4):
            if made == nodes:
                break
            child = TreeNode(parent)
            child.host_value = host.alloc(per_node)
            child.host_ref_counter = int(made % 10 == 0)
            parent.children[k] = child
            level.append(child)
            made += 1
    return root, host


def time_read(nodes: int, repeat: int) -> float:
    root, host = tree(nodes)
    sched = SimpleNamespace(tree_cache=SimpleNamespace(token_to_kv_pool_host=host, root_node=root))
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        account = host_account(sched, Reading())
        runs.append(time.perf_counter() - start)
    assert account is not None
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'nodes':>8} {'read (ms)':>10} {'per node (us)':>14} {'thread share @0.1 s':>20}")
    for n in SIZES:
        t = time_read(n, args.repeat)
        print(f"{n:>8} {t * 1e3:>10.3f} {t / n * 1e6:>14.3f} {t / SAMPLE_INTERVAL_S:>19.2%}")


if __name__ == "__main__":
    main()
