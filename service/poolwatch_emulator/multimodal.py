"""Multimodal and encoder-decoder requests on an emulated worker: their encoder inputs go through
the worker's encoder cache (:mod:`poolwatch_emulator.encoder_cache`, vLLM's managers) in the
places vLLM's scheduler touches it.

* Admission (the prefill adder): every input whose placeholder starts inside the chunk is found
  cached (``check_and_update_cache``) or allocated (``can_allocate`` / ``allocate``, within the
  step's ``max_num_encoder_input_tokens``); the chunk stops before the first that fits in neither.
  A waiting request that is then not admitted (no KV room) gives its entries back (PR #31857);
  ``encoder-waiting-holds-entries`` (V16) keeps them.
* After each step: a multimodal request drops its reference to every input whose placeholder
  its KV now covers (``free_encoder_input``); an encoder-decoder request calls it for all its
  inputs on every step, as vLLM's ``_free_encoder_inputs`` does.
* Finish, abort, retraction: ``free(request)``; the step's reclaimed hashes are collected
  (``get_freed_mm_hashes``) as the scheduler output carries them to the model runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poolwatch_emulator.encoder_cache import EncoderCacheManager, EncoderDecoderCacheManager

if TYPE_CHECKING:
    from poolwatch_emulator.encoder_cache import EncoderCacheConfig
    from poolwatch_emulator.faults import FaultPlan
    from poolwatch_emulator.req import Req

__all__ = ["SchedulerEncoderMixin", "make_encoder_cache"]


def make_encoder_cache(config: EncoderCacheConfig | None, faults: FaultPlan) -> EncoderCacheManager | None:
    if config is None:
        return None
    kind = EncoderDecoderCacheManager if config.kind == "enc-dec" else EncoderCacheManager
    return kind(config.cache_size, faults)


class SchedulerEncoderMixin:
    """Mixed into the scheduler (``self`` is the scheduler)."""

    def emu_encoder_new_step(self: Any) -> None:
        """A new scheduling pass: the step's encoder compute budget is whole again."""
        self.emu_encoder_scheduled = 0

    def emu_schedule_encoder_inputs(
        self: Any, req: Req, start: int, num_new_tokens: int
    ) -> tuple[int, list[int]]:
        """``(tokens of the chunk [start, start + num_new_tokens) that may run, inputs to allocate once
        the request is admitted)``: the chunk stops before the first input starting in it that is
        neither cached (a hit adds the request's reference at once) nor allocatable."""
        manager = self.encoder_cache_manager
        if manager is None or not req.mm_features:
            return num_new_tokens, []
        encdec = isinstance(manager, EncoderDecoderCacheManager)
        held = set() if encdec else manager.get_cached_input_ids(req)
        to_allocate: list[int] = []
        for input_id, feature in enumerate(req.mm_features):
            offset = feature.mm_position.offset
            if not start <= offset < start + num_new_tokens or input_id in held:
                continue
            if manager.check_and_update_cache(req, input_id):
                continue
            budget = self.max_num_encoder_input_tokens - self.emu_encoder_scheduled
            if not manager.can_allocate(req, input_id, budget, self.emu_encoder_scheduled):
                return offset - start, to_allocate
            to_allocate.append(input_id)
            self.emu_encoder_scheduled += req.get_num_encoder_embeds(input_id)
        return num_new_tokens, to_allocate

    def emu_encoder_admitted(self: Any, req: Req, to_allocate: list[int]) -> None:
        for input_id in to_allocate:
            self.encoder_cache_manager.allocate(req, input_id)

    def emu_encoder_not_admitted(self: Any, req: Req, to_allocate: list[int]) -> None:
        """A waiting request the adder turned away: the references its hits took go back (PR
        #31857), unless ``encoder-waiting-holds-entries`` (V16) keeps them."""
        manager = self.encoder_cache_manager
        self.emu_encoder_scheduled -= sum(req.get_num_encoder_embeds(i) for i in to_allocate)
        if manager is None or not manager.get_cached_input_ids(req):
            return
        if isinstance(manager, EncoderDecoderCacheManager):
            return
        if not self.faults.fires("encoder-waiting-holds-entries"):
            manager.free(req)

    def emu_encoder_after_step(self: Any, req: Req) -> None:
        """What a step consumed: inputs whose placeholders the request's KV now covers."""
        manager = self.encoder_cache_manager
        if manager is None or not req.mm_features:
            return
        if isinstance(manager, EncoderDecoderCacheManager):
            manager.free(req)  # every step, for every input (vLLM's enc-dec branch)
            return
        done = req.kv_committed_len
        for input_id in list(manager.get_cached_input_ids(req)):
            pos = req.mm_features[input_id].mm_position
            if pos.offset + pos.length <= done:
                manager.free_encoder_input(req, input_id)

    def emu_encoder_release(self: Any, req: Req) -> None:
        """A finished, aborted or retracted request lets go of its inputs."""
        if self.encoder_cache_manager is not None and req.mm_features:
            self.encoder_cache_manager.free(req)

    def emu_encoder_end_step(self: Any) -> None:
        if self.encoder_cache_manager is not None:
            self.emu_freed_mm_hashes = self.encoder_cache_manager.get_freed_mm_hashes()
