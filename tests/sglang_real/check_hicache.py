"""The probe's HiCache ``host`` account on one real SGLang release's classes, on CPU.

Run inside a release venv (``scripts/sglang_venv.py``) with this checkout's ``service/`` on
``PYTHONPATH``::

    python tests/sglang_real/check_hicache.py 0.5.9

It builds SGLang's own host pool (``MHATokenToKVPoolHost`` with its real ``clear``/``alloc``/
``free``; the KV buffers are not allocated), SGLang's own ``TreeNode`` objects carrying host copies
and host locks (``protect_host``), and a ``HiRadixCache`` object, reads them with
:func:`poolwatch.probe.sglang.host_census.host_account`, and prints one JSON line per check.  The
exit code is the number of failed checks.  On 0.5.9 it also runs SGLang's own ``evict_host``.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import torch
from sglang.srt.mem_cache.hiradix_cache import HiRadixCache
from sglang.srt.mem_cache.memory_pool_host import HostKVCache, MHATokenToKVPoolHost
from sglang.srt.mem_cache.radix_cache import TreeNode

from poolwatch.conservation import gap
from poolwatch.model.rank import PoolAccount
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.host_census import host_account
from poolwatch.probe.sglang.mamba_census import tree_values
from rigs.checks import failures, report


def host_pool(size: int) -> Any:
    host = object.__new__(MHATokenToKVPoolHost)  # its KV buffers are not needed for the accounting
    host.size, host.page_size, host.device, host.lock = size, 1, "cpu", threading.RLock()
    HostKVCache.clear(host)
    return host


def child(parent: Any, host: Any, n: int, key: int) -> Any:
    node = TreeNode()
    node.parent = parent
    node.host_value = host.alloc(n)
    parent.children[key] = node
    return node


def hicache(host: Any, root: Any) -> Any:
    tree = object.__new__(HiRadixCache)
    tree.token_to_kv_pool_host, tree.root_node = host, root
    tree.enable_storage, tree.ongoing_prefetch = False, {}
    tree.ongoing_write_through, tree.ongoing_load_back = {}, {}
    return type("Sched", (), {"tree_cache": tree})()


def read(sched: Any) -> PoolAccount:
    account = host_account(sched, Reading())
    assert account is not None
    return account


def figures(a: PoolAccount) -> dict[str, Any]:
    return {
        "size": a.size,
        "free": a.available,
        "evictable": a.evictable,
        "protected": a.protected,
        "held": a.held,
        "gap": gap(a),
    }


def main(version: str) -> int:
    host = host_pool(64)
    root = TreeNode()
    root.host_value = []  # as RadixCache.reset sets it on a HiRadixCache
    a = child(root, host, 16, 1)
    b = child(a, host, 8, 2)
    c = child(root, host, 4, 3)
    b.protect_host()  # a prefetch or a storage backup holds its host copy
    sched = hicache(host, root)
    acc = read(sched)
    expected = {"size": 64, "free": 36, "evictable": 20, "protected": 8, "held": 0, "gap": 0}
    report("balanced: free + host copies == size", figures(acc) == expected, figures(acc))
    b.release_host()
    acc = read(sched)
    report("a released host lock moves its copy to evictable", (acc.evictable, acc.protected) == (28, 0))
    host.free(c.host_value)  # SGLang's own free, while the node keeps its host copy
    acc = read(sched)
    report("a host copy freed while on its node is a surplus of its size", gap(acc) == -4, figures(acc))
    c.host_value = host.alloc(4)  # re-take fresh slots: balanced again
    lost = a.children.pop(2)
    lost.parent = None  # dropped from the tree without SGLang's evict_host: its host slots are lost
    acc = read(sched)
    report(
        "a node dropped without freeing its host copy is a deficit of its size", gap(acc) == 8, figures(acc)
    )
    host.free(lost.host_value)
    report("freed after all: balanced", gap(read(sched)) == 0)
    sched.tree_cache.enable_storage = True
    acc = read(sched)
    report(
        "with a storage backend only size and free are reported",
        (acc.size, acc.available, gap(acc), acc.unreadable)
        == (64, host.available_size(), None, ("held", "evictable", "protected")),
        figures(acc),
    )
    sched.tree_cache.enable_storage = False
    device_values_of_a_tree_evicted_to_host(sched.tree_cache, a)
    if version.startswith("0.5.9"):
        evict_host_by_sglang(sched, root, c)
    return failures()


def device_values_of_a_tree_evicted_to_host(tree: Any, kept: Any) -> None:
    """The full census reads the device values of a tree whose other nodes were evicted to host
    (``value`` None): SGLang's own ``all_values_flatten`` cannot concatenate them (TypeError), so the
    census walks the nodes (it once failed whole there, and the probe reported itself degraded)."""
    kept.value = torch.tensor([5, 6, 7])
    try:
        tree.all_values_flatten()
        raised = ""
    except TypeError as exc:
        raised = type(exc).__name__
    values = [v.tolist() for v in tree_values(tree, "all_values_flatten", "value")]
    report(
        "a tree evicted to host: the census walks the device values SGLang's flatten cannot join",
        (raised, values) == ("TypeError", [[5, 6, 7]]),
        {"sglang_flatten": raised, "values": values},
    )
    kept.value = None


def evict_host_by_sglang(sched: Any, root: Any, node: Any) -> None:
    """SGLang 0.5.9's own ``HiRadixCache.evict_host`` frees an evicted leaf's host copy."""
    from sglang.srt.managers.cache_controller import HiCacheController
    from sglang.srt.mem_cache.evict_policy import LRUStrategy
    from sglang.srt.mem_cache.radix_cache import RadixKey

    tree = sched.tree_cache
    controller = object.__new__(HiCacheController)
    controller.mem_pool_host = tree.token_to_kv_pool_host
    tree.cache_controller, tree.eviction_strategy = controller, LRUStrategy()
    tree.get_child_key_fn = lambda key: 3
    node.key, node.value = RadixKey([7, 7, 7, 7]), None  # device copy evicted, host copy kept
    tree.evictable_host_leaves = {node}
    tree._update_host_leaf_status = lambda n: None
    before = tree.token_to_kv_pool_host.available_size()
    tree.evict_host(4)
    acc = read(sched)
    report(
        "SGLang's evict_host frees the host copy and the account stays balanced",
        gap(acc) == 0 and acc.available == before + 4 and 3 not in root.children,
        figures(acc),
    )


if __name__ == "__main__":
    print(json.dumps({"release": sys.argv[1], "torch": torch.__version__}), file=sys.stderr)
    sys.exit(main(sys.argv[1]))
