"""A store-on-finish KV connector (scheduler side) for V06, registered with vLLM's connector
factory the way vLLM's own tests register their mock connector: it matches nothing, loads
nothing, and answers every finished request with "my save is asynchronous" (keep its blocks until
I report it sent) -- the contract of LMCache's multi-process connector.  The worker side is never
built (no model runs).  Run inside a vLLM release venv."""

from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorMetadata

__all__ = ["StoreOnFinish"]


class StoreOnFinish(KVConnectorBase_V1):  # type: ignore[misc]
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        return 0, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        return None

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        return KVConnectorMetadata()

    def request_finished(self, request: Any, block_ids: Any) -> tuple[bool, dict[str, Any] | None]:
        return True, None

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        raise NotImplementedError("scheduler side only")

    def wait_for_layer_load(self, layer_name: str) -> None:
        raise NotImplementedError("scheduler side only")

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        raise NotImplementedError("scheduler side only")

    def wait_for_save(self) -> None:
        raise NotImplementedError("scheduler side only")
