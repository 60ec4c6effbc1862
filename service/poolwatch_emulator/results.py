"""The forward pass and what follows it: ``run_batch`` (deterministic next tokens) and
``process_batch_result`` (append tokens, finish and release requests, insert prefills into the
prefix cache, log decode stats every ``decode_log_interval`` steps)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from poolwatch_emulator.req import Req, ScheduleBatch

__all__ = ["SchedulerResultMixin"]


class SchedulerResultMixin:
    def emu_release(self: Any, req: Req) -> None:
        """A finished request gives everything back (the prefix goes into the tree); with the decode
        offload, once its KV is on the host."""
        self.emu_encoder_release(req)
        offload = self.decode_offload_manager
        if offload is None or not offload.offload_kv_cache(req):
            self.tree_cache.cache_finished_req(req)

    def emu_abort_release(self: Any, req: Req) -> None:
        """An aborted request with KV: no insert, free what it holds privately."""
        req.finished_reason = req.finished_reason or "abort"
        self.emu_encoder_release(req)
        self.tree_cache.cache_finished_req(req, is_insert=False)

    def run_batch(self: Any, batch: ScheduleBatch) -> list[int]:
        """The "forward pass": the next token of every request (deterministic)."""
        self.forward_ct += 1
        return [(len(r.output_ids) * 7919 + len(r.origin_input_ids)) % 50_000 + 1 for r in batch.reqs]

    def process_batch_result(self: Any, batch: ScheduleBatch, result: list[int]) -> None:
        if batch.forward_mode.is_decode():
            self.process_batch_result_decode(batch, result)
        elif self.is_prefill_mode:
            self.process_batch_result_disagg_prefill(batch, result)
        else:
            self.process_batch_result_prefill(batch, result)

    def emu_prefilled(self: Any, batch: ScheduleBatch, result: list[int]) -> Iterator[Req]:
        """A prefill step's requests after their encoder step, each but the chunked one (still
        prefilling) with its first new token appended, one at a time as the caller handles it."""
        for req in batch.reqs:
            self.emu_encoder_after_step(req)
        for req, token in zip(batch.reqs, result, strict=True):
            if req is not self.chunked_req:
                req.output_ids.append(token)
                yield req

    def process_batch_result_prefill(self: Any, batch: ScheduleBatch, result: list[int]) -> None:
        for req in self.emu_prefilled(batch, result):
            req.check_finished()
            if req.finished():
                self.emu_finish(req)
            else:
                self.tree_cache.cache_unfinished_req(req)

    def process_batch_result_decode(self: Any, batch: ScheduleBatch, result: list[int]) -> None:
        spec = self.settings.speculative is not None
        for req, token in zip(batch.reqs, result, strict=True):
            if req.finished():
                continue
            self.emu_encoder_after_step(req)
            if spec:  # the verify step: the accepted tokens, committed (their KV written)
                self.num_generated_tokens += self.emu_spec_verify(req, token)
            else:
                req.output_ids.append(token)
                self.num_generated_tokens += 1
            req.check_finished()
            if req.finished():
                self.emu_finish(req)
        self.forward_ct_decode += 1
        if self.forward_ct_decode % self.server_args.decode_log_interval == 0:
            self.log_decode_stats(batch)

    def emu_finish(self: Any, req: Req) -> None:
        if req.finished_reason == "abort":
            self.emu_abort_release(req)
        else:
            self.emu_release(req)
        self.emu_finished_total += 1
