"""vLLM V1's own scheduler on CPU, stepped as EngineCore steps it (run inside a release venv).

No model runs: each step's output is made here (one sampled token per request past its prompt),
exactly the shape ``update_from_output`` reads, so the scheduler, the KV cache manager, the
coordinator and the block pool are vLLM's own and run their own code -- the way vLLM's own unit
tests drive ``Scheduler``.  A KV connector's transfers are stood in for the same way: a step can
report requests whose sending or receiving finished, and a connector's worker metadata
(``KVConnectorOutput``); the connector's scheduler side is vLLM's own.  With speculative decoding
the worker accepts no draft (the scheduler's drafts are all rejected: one token a step).  The model
config is a tiny Llama's (or Whisper's) ``config.json`` written to a temporary directory (no
weights, no tokenizer, no hub).

:class:`Engine` is one scheduler: vLLM's ``Scheduler``, or with ``batch_queue`` > 1 its
``AsyncScheduler`` with async scheduling on, stepped like EngineCore's batch queue (step N+1 is
scheduled before step N's output is applied).  It counts engine steps and feeds a
:class:`~rigs.timeline.Timeline` every snapshot the probe published and vLLM's own assert.

Kept whole: one class, one scheduler and the step that drives it -- the requests it adds, the
outputs it makes and the asserts it records share the scheduler's state and its step count; what
the scheduler is built from is :mod:`rigs.vllm.configs`.
"""

from __future__ import annotations

import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, probe_of
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from rigs.timeline import Timeline
from rigs.vllm.configs import BLOCK, EOS, RELEASE, Groups, accepted, kv_cache_config, sha256, vllm_config

__all__ = ["Engine", "Ticks", "assert_site"]


class Ticks:
    """Every clock read is a second later: every sample is due, every census interval passes."""

    def __init__(self) -> None:
        self.now = time.monotonic()  # the probe's clock so far: its census timer started on it

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class Engine:
    """One vLLM scheduler of this venv's release, stepped as EngineCore steps it."""

    def __init__(
        self,
        blocks: int = 400,
        *,
        hybrid: bool = False,
        max_running: int = 16,
        max_tokens: int = 512,
        max_model_len: int = 2048,
        batch_queue: int = 1,
        connector: dict[str, Any] | None = None,
        timeline: Timeline | None = None,
        groups: Groups | None = None,
        model: str = "llama",
        prefix_caching: bool = True,
        chunked: bool = True,
        drafts: int = 0,
    ) -> None:
        """``batch_queue`` > 1: async scheduling (``AsyncScheduler``), that many steps in flight;
        ``connector``: a ``KVTransferConfig``'s fields (vLLM's own connector by name); ``groups``:
        the KV cache groups beside full attention (:class:`~rigs.vllm.configs.Groups`); ``model``:
        ``llama`` or ``whisper``; ``drafts``: n-gram speculative decoding, that many drafts a step."""
        from vllm.v1.core.kv_cache_utils import init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output import StructuredOutputManager

        self.release, self.depth, self.timeline = RELEASE, batch_queue, timeline
        config = vllm_config(
            max_running,
            max_tokens,
            max_model_len,
            model=model,
            prefix_caching=prefix_caching,
            chunked=chunked,
            drafts=drafts,
            async_scheduling=batch_queue > 1,
        )
        config.cache_config.num_gpu_blocks = blocks
        if hybrid:
            config.cache_config.mamba_cache_mode = "align"
        if batch_queue > 1:
            config.scheduler_config.async_scheduling = True  # max_concurrent_batches: 2
        if connector is not None:
            from vllm.config import KVTransferConfig

            config.kv_transfer_config = KVTransferConfig(**connector)
        init_none_hash(sha256())
        cls: Any = Scheduler
        if batch_queue > 1:
            from vllm.v1.core.sched.async_scheduler import AsyncScheduler

            cls = AsyncScheduler
        # AsyncScheduler takes *args, **kwargs: the names are Scheduler's
        self.sched = cls(
            **accepted(
                Scheduler,
                vllm_config=config,
                kv_cache_config=kv_cache_config(blocks, groups=groups or Groups(hybrid=hybrid)),
                structured_output_manager=StructuredOutputManager(config),
                block_size=BLOCK,
                hash_block_size=BLOCK,
                log_stats=False,
            )
        )
        self.pending: deque[tuple[Any, Any]] = deque()
        self.steps = 0

    def attach(self, config: ProbeConfig) -> VllmProbe:
        """The probe of ``config`` on this scheduler, its clock a second further at every read; with
        a timeline, its wall time the engine's (:meth:`now`), so what it ages -- a hold, a stall --
        ages in engine steps, as the timeline's detector judges them."""
        wall = self.now if self.timeline is not None else None
        probe = attach(
            VLLM, self.sched, config, release=vllm_release(RELEASE.version), clock=Ticks(), wall=wall
        )
        assert isinstance(probe, VllmProbe)
        return probe

    def now(self) -> float:
        """The engine's wall time: its timeline's time of the step being run."""
        assert self.timeline is not None
        return self.timeline.at(self.steps)

    def request(
        self,
        rid: str,
        prompt: list[int],
        max_tokens: int,
        *,
        transfer: dict[str, Any] | None = None,
        **more: Any,
    ) -> Any:
        """A vLLM ``Request``; ``transfer``: its ``kv_transfer_params`` (a P/D hand-off), ``more``:
        the other fields its release takes (``mm_features``)."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher
        from vllm.v1.request import Request

        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        request = Request(
            **accepted(
                Request,
                request_id=rid,
                prompt_token_ids=prompt,
                sampling_params=params,
                pooling_params=None,
                eos_token_id=EOS,
                block_hasher=get_request_block_hasher(BLOCK, sha256()),
                **more,
            )
        )
        if transfer is not None:
            request.kv_transfer_params = transfer
        return request

    def add(
        self,
        rid: str,
        prompt: list[int],
        max_tokens: int,
        *,
        transfer: dict[str, Any] | None = None,
        **more: Any,
    ) -> None:
        self.sched.add_request(self.request(rid, prompt, max_tokens, transfer=transfer, **more))

    def abort(self, rids: list[str]) -> None:
        from vllm.v1.request import RequestStatus

        self.sched.finish_requests(rids, RequestStatus.FINISHED_ABORTED)

    def step(
        self,
        token: int = 7,
        *,
        sent: Iterable[str] = (),
        received: Iterable[str] = (),
        worker_meta: Any = None,
        forward: Callable[[], object] | None = None,
    ) -> Any:
        """One engine step: schedule, a made-up model output (``sent`` / ``received``: requests whose
        KV transfer finished, as a connector reports them; ``worker_meta``: the connector's worker
        metadata), update -- with a batch queue, the oldest output in flight once the queue is full
        or nothing new was scheduled.  ``forward``: what stands for the model's forward pass, run
        where EngineCore waits for it (after ``schedule``, before ``update_from_output``; the loop
        benchmarks sleep there).  The scheduler output."""
        try:
            out = self.sched.schedule()
        except AssertionError as exc:
            self._engine_said(exc)
            self.steps += 1
            raise
        if forward is not None:
            forward()
        self.pending.append((out, self._output(out, token, set(sent), set(received), worker_meta)))
        try:
            if len(self.pending) >= self.depth or out.total_num_scheduled_tokens == 0:
                self.sched.update_from_output(*self.pending.popleft())
        except AssertionError as exc:
            self._engine_said(exc)
            raise
        finally:
            self.steps += 1
            self._seen()
        return out

    def settle(self) -> None:
        """Apply every output still in flight (the batch queue drained)."""
        while self.pending:
            self.sched.update_from_output(*self.pending.popleft())

    def _output(self, out: Any, token: int, sent: set[str], received: set[str], worker_meta: Any) -> Any:
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

        ids = list(out.num_scheduled_tokens)
        # a request still inside its prompt (a chunked prefill) samples nothing this step; in flight
        # (a batch queue) the scheduler says so itself
        if self.depth > 1:
            sampled = [[] if _prefill_chunk(self.sched.requests[rid]) else [token] for rid in ids]
        else:
            done = [
                self.sched.requests[rid].num_computed_tokens >= self.sched.requests[rid].num_tokens
                for rid in ids
            ]
            sampled = [[token] if d else [] for d in done]
        extra: dict[str, Any] = {}
        if sent or received or worker_meta is not None:
            fields = {"finished_sending": sent, "finished_recving": received}
            if worker_meta is not None:
                fields["kv_connector_worker_meta"] = worker_meta
            extra["kv_connector_output"] = KVConnectorOutput(**accepted(KVConnectorOutput, **fields))
        return ModelRunnerOutput(
            **accepted(
                ModelRunnerOutput,
                req_ids=ids,
                req_id_to_index={r: i for i, r in enumerate(ids)},
                sampled_token_ids=sampled,
                logprobs=None,
                prompt_logprobs_dict={},
                pooler_output=[],
                **extra,
            )
        )

    def _seen(self) -> None:
        if self.timeline is not None:
            probe = probe_of(self.sched)
            self.timeline.look(self.steps, probe.latest if probe is not None else None)

    def _engine_said(self, exc: AssertionError) -> None:
        """At the step being run (counted from 1, as the look after the step that finished it)."""
        if self.timeline is not None:
            self.timeline.engine_said(self.steps + 1, assert_site(exc))


def _prefill_chunk(req: Any) -> bool:
    """Whether ``req``'s scheduled step is a chunk inside its prompt (it samples nothing): vLLM's
    own flag, or on releases without it (0.10.2) the prompt not yet covered by the computed tokens,
    which async scheduling advanced at ``schedule``."""
    flag = getattr(req, "is_prefill_chunk", None)
    return bool(flag) if flag is not None else bool(req.num_computed_tokens < req.num_prompt_tokens)


def assert_site(exc: AssertionError) -> str:
    """Where vLLM's own assertion fired: ``file:line source``."""
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{Path(where.filename).name}:{where.lineno} {where.line}"
