"""The end-to-end stack never gives two servers one port (issue 34's cold CI run).

Two sidecars given one port made one sidecar answer for two pods: its readiness passed for both,
Prometheus scraped it under both names, and a page named worker prefill-1 with pod decode-0.  The
stack's ports now come from one allocator that never hands a port out twice, and the as-deployed
test checks that each pod's address answers as that pod's sidecar (``poolwatch_sidecar_info``).
"""

from __future__ import annotations

from tests.helpers import asgi_client

from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.store import SnapshotStore
from rigs.stack.processes import free_port, free_ports


def test_no_port_is_handed_out_twice_and_a_block_takes_no_single_ones() -> None:
    singles = [free_port() for _ in range(200)]
    base = free_ports(8)
    block = set(range(base, base + 8))
    more = [free_port() for _ in range(200)]
    assert len(set(singles + more)) == 400
    assert not block & set(singles + more)


async def test_a_sidecar_says_which_pod_it_serves_and_none_outside_kubernetes() -> None:
    named = create_app(Settings.from_env({"POOLWATCH_POD": "decode-0"}), store=SnapshotStore(), sources=[])
    async with asgi_client(named) as client:
        assert 'poolwatch_sidecar_info{sidecar_pod="decode-0"} 1.0' in (await client.get("/metrics")).text
    unnamed = create_app(Settings.from_env({}), store=SnapshotStore(), sources=[])
    async with asgi_client(unnamed) as client:
        body: str = (await client.get("/metrics")).text
    assert "poolwatch_sidecar_info" not in body
