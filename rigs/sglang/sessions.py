"""Streaming sessions on a rank (run in the release's venv): the release's own session cache
wrapped round the rank's tree (0.5.10's ``SessionAwareCache``, 0.5.11's ``StreamingSession``: the
table's ``sessions`` column) and its own ``SessionController`` (open, a turn's request made by the
session, close), SGLang's own session-held counts bound on the rank for its checks.  What is stood
in for: the tokenized request a turn arrives as (its fields at their defaults).
"""

from __future__ import annotations

from types import MethodType, SimpleNamespace
from typing import Any

from rigs.sglang.releases import Check, Release

__all__ = ["Sessions"]

# SGLang's own session-held counts (the checker mixin's), bound on a rank that runs sessions
_HELD = (
    "_active_pool_idxs",
    "_session_held_tokens",
    "_session_held_full_tokens",
    "_session_held_swa_tokens",
    "_session_held_req_count",
    "_session_held_mamba_slots",
)


class _Defaults(SimpleNamespace):
    """A tokenized request: a field the release's ``create_req`` reads and the turn does not set is
    ``None``, its default."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


class Sessions:
    """The session steps of a :class:`~rigs.sglang.driver.Driver`."""

    release: Release
    sched: Any

    def open_sessions(self) -> Any:
        """Wrap the rank's tree in the release's session cache and make its controller."""
        if self.release.sessions == "aware":
            from sglang.srt.managers.session_controller import SessionController
            from sglang.srt.mem_cache.session_aware_cache import SessionAwareCache as Wrapper
        else:
            from sglang.srt.session.session_controller import SessionController
            from sglang.srt.session.streaming_session import StreamingSession as Wrapper
        s = self.sched
        s.tree_cache = Wrapper(s.tree_cache)
        s.session_controller = SessionController(s.tree_cache)
        if self.release.check is Check.CHECKER:
            s._checker(s.session_controller)
        else:
            from sglang.srt.managers.scheduler_runtime_checker_mixin import SchedulerRuntimeCheckerMixin

            for name in _HELD:
                if hasattr(SchedulerRuntimeCheckerMixin, name):
                    setattr(s, name, MethodType(getattr(SchedulerRuntimeCheckerMixin, name), s))
        return s.session_controller

    def open_session(self, sid: str) -> Any:
        from sglang.srt.managers.io_struct import OpenSessionReqInput

        self.sched.session_controller.open(
            OpenSessionReqInput(capacity_of_str_len=1000, session_id=sid, streaming=True)
        )
        return self.sched.session_controller.get(sid)

    def turn(self, sid: str, rid: str, ids: list[int], max_new: int = 2) -> Any:
        """A turn of session ``sid``: the request the session makes of it (SGLang's ``create_req``)."""
        import array

        from sglang.srt.sampling.sampling_params import SamplingParams

        params = SamplingParams(max_new_tokens=max_new)
        params.normalize(None)
        wants_array = self.release.token_array
        tokens = array.array("q", ids) if wants_array else list(ids)
        sent = _Defaults(
            rid=rid, input_ids=tokens, sampling_params=params, stream=False, return_logprob=False,
            top_logprobs_num=0, require_reasoning=False, return_hidden_states=False,
            return_routed_experts=False,
            session_params=_Defaults(id=sid),
        )  # fmt: skip
        return self.sched.session_controller.get(sid).create_req(sent, None, vocab_size=1000)

    def close_session(self, sid: str) -> None:
        from sglang.srt.managers.io_struct import CloseSessionReqInput

        self.sched.session_controller.close(CloseSessionReqInput(session_id=sid))

    def session_mamba(self) -> list[int]:
        """The Mamba slots the session slots hold (their working slot and ping-pong slots)."""
        held: list[int] = []
        for slot in getattr(self.sched.tree_cache, "slots", {}).values():
            for ref in (slot.mamba_pool_idx, getattr(slot, "mamba_ping_pong_track_buffer", None)):
                if ref is not None:
                    held += [int(i) for i in ref.reshape(-1).tolist()]
        return held
