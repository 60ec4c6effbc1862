"""V06 (#46240): a request aborted while it waits for its remote KV, under a connector that also
keeps it for a send (MultiConnector over NIXL and a store-on-finish connector).  The first
transfer to finish frees its blocks and forgets the request while the other transfer still reads
or writes them; the second one's report trips vLLM's own ``assert req_id in self.requests``.

vLLM's own ``Scheduler`` and ``MultiConnector`` over its own ``NixlConnector`` (scheduler side, no
NIXL agent) and a store-on-finish child registered the way vLLM's tests register their mock
connector: it matches nothing and answers every finish with "the save is asynchronous" (the
contract of LMCache's multi-process connector, which the reporter ran beside NIXL).  The worker's
reports are stood in for: the receive finishes at step 3, the send at step 4.  Unfixed in every
release (the fix is open); the control applies its idea: the blocks go back when the last
pending transfer of an aborted request lands.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug
from rigs.bugs.vllm.shared import affected, blocks_of, record, remote_prefill, started

__all__ = ["BUG", "run"]

BUG = Bug(
    id="V06",
    engine="vllm",
    title="abort with a KV receive and a send pending: the first completion frees, the second asserts",
    issue="https://github.com/vllm-project/vllm/issues/46240",
    fix="https://github.com/vllm-project/vllm/pull/56089",
    bug_class="freed-in-flight",
    affected="0.34.0",
    fixed="0.34.0+fix",
    trigger="abort in WAITING_FOR_REMOTE_KVS under MultiConnector(NIXL + store-on-finish); recv then send",
)
STORE = "PoolwatchStoreOnFinish"


def run(release: str) -> dict[str, Any]:
    _register()
    connector = {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "connectors": [
                {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                {"kv_connector": STORE, "kv_role": "kv_both"},
            ]
        },
    }
    e, timeline = started(40, max_running=8, max_tokens=256, connector=connector)
    if not affected(release):
        _free_at_the_last_transfer(e)
    e.add("R", [10 + i for i in range(100)], 4, transfer=remote_prefill("R", 7))
    e.step()
    e.abort(["R"])  # the client disconnects while R waits for the prefill's KV
    blocks = sorted(blocks_of(e.sched, "R"))
    e.step()
    try:
        e.step(received={"R"})  # the NIXL read lands; the store still reads R's blocks
        if "R" not in e.sched.requests:
            timeline.wrong(e.steps, f"R's blocks {blocks} freed at its receive, its store still reading them")
        e.step(sent={"R"})  # the store finishes
        for _ in range(5):
            e.step()
    except AssertionError:
        pass  # vLLM's own signal (on the timeline)
    return record(timeline, release, blocks=blocks)


def _register() -> None:
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    if STORE not in KVConnectorFactory._registry:
        KVConnectorFactory.register_connector(STORE, "rigs.bugs.vllm.store_on_finish", "StoreOnFinish")


def _free_at_the_last_transfer(e: Any) -> None:
    """The control (#56089's idea): an aborted request with a receive pending that a connector also
    keeps for a send is freed when the last of the two lands; a completion before that is held
    back from vLLM, and both in one report count once."""
    from vllm.v1.request import RequestStatus

    sched, pending = e.sched, {}
    finish, connector_finished, finished = (
        sched.finish_requests, sched._connector_finished, sched._update_from_kv_xfer_finished,
    )  # fmt: skip
    receiving: set[str] = set()

    def finishing(ids: Any, status: Any) -> Any:
        ids = [ids] if isinstance(ids, str) else list(ids or ())
        receiving.clear()
        receiving.update(
            r
            for r in ids
            if r in sched.requests and sched.requests[r].status == RequestStatus.WAITING_FOR_REMOTE_KVS
        )
        return finish(ids, status)

    def keeping(request: Any) -> Any:
        delay, params = connector_finished(request)
        if delay and request.request_id in receiving:
            pending[request.request_id] = {"recv", "send"}
        return delay, params

    def transferred(output: Any) -> Any:
        for kind, ids in (("recv", output.finished_recving), ("send", output.finished_sending)):
            for rid in list(ids or ()):
                if rid in pending:
                    pending[rid].discard(kind)
                    if pending[rid]:
                        ids.discard(rid)
                    else:
                        del pending[rid]
        both = set(output.finished_recving or ()) & set(output.finished_sending or ())
        output.finished_sending.difference_update(both)
        return finished(output)

    sched.finish_requests, sched._connector_finished = finishing, keeping
    sched._update_from_kv_xfer_finished = transferred
