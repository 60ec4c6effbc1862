"""What the PD prefill loops (:mod:`rigs.sglang.pd_prefill`, :mod:`rigs.sglang.pd_pipeline`) stand
in for, as SGLang's own CPU tests of the path do: a request's KV sender, scripted by the test; the
tokenizer's socket; the cross-rank poll reduction (each sender's own poll on one rank); and what a
launch leaves for the result path (the batch's copy and a forward's result of one sampled token per
request).  Run in the release's venv.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rigs.sglang.pieces import Batch

__all__ = ["Sender", "Tokenizer", "launched", "poll_each_sender"]


class Sender:
    """A request's KV sender as the decode side drives it: its poll is what the test sets (from
    ``state``), and an abort concludes it as failed, as a real sender reports an aborted room."""

    def __init__(self, state: Any) -> None:
        self.state, self.aborted = state, False

    def poll(self) -> Any:
        return self.state

    def abort(self) -> None:
        from sglang.srt.disaggregation.base import KVPoll

        self.aborted, self.state = True, KVPoll.Failed

    def failure_exception(self) -> None:
        raise RuntimeError("the decode side is gone")

    def clear(self) -> None:
        return None

    def get_transfer_metric(self) -> Any:
        from sglang.srt.disaggregation.base.conn import KVTransferMetric

        return KVTransferMetric()


class Tokenizer:
    """The tokenizer's socket: what the scheduler sends back is kept."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send_output(self, out: Any, req: Any = None) -> None:
        self.sent.append(out)


def poll_each_sender() -> None:
    """One rank: the cross-rank minimum of the polls is each sender's own poll."""
    from sglang.srt.disaggregation import prefill

    prefill.poll_and_all_reduce_attn_cp_tp_group = lambda senders, *_: [int(x.poll()) for x in senders]


def launched(batch: Batch) -> tuple[Batch, Any]:
    """What a launch leaves for the result path: ``batch.copy()`` and the forward's result."""
    return _copy(batch), _result(batch)


def _copy(batch: Batch) -> Batch:
    """``batch.copy()``: what the result processor iterates, with the fields it reads."""
    done = Batch(list(batch.reqs), batch.forward_mode)
    done.spec_info = done.prefill_stats = done.dp_cooperation_info = None  # type: ignore[attr-defined]
    return done


def _result(batch: Batch) -> Any:
    """The forward's result: one sampled token per request, nothing else."""
    import torch

    none = dict.fromkeys(
        ("logits_output", "extend_input_len_per_req", "extend_logprob_start_len_per_req", "copy_done",
         "auxiliary_host_output", "routed_experts_output", "indexer_topk_output", "next_draft_input")
    )  # fmt: skip
    return SimpleNamespace(
        next_token_ids=torch.tensor([7] * len(batch.reqs)), can_run_cuda_graph=False, **none
    )
