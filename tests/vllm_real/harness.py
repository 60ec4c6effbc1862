"""Building and stepping vLLM V1's real ``Scheduler`` on CPU (run inside a release venv).

No model runs: each step's output is made here (one sampled token per scheduled request), exactly
the shape ``update_from_output`` reads, so the scheduler, the KV cache manager, the coordinator and
the block pool are vLLM's own and run their own code.  The model config is a tiny Llama
``config.json`` written to a temporary directory (no weights, no tokenizer, no hub access).
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import vllm
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

VERSION = vllm.__version__
BLOCK = 16
EOS = 2
TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": EOS,
}


def _hash_fn() -> Any:
    try:
        from vllm.utils.hashing import sha256
    except ImportError:  # 0.11: vllm.utils
        from vllm.utils import sha256  # type: ignore[no-redef]
    return sha256


def _kwargs(cls: Any, **wanted: Any) -> dict[str, Any]:
    """Only the keyword arguments ``cls`` accepts (field names move between releases)."""
    params = inspect.signature(cls).parameters
    return {k: v for k, v in wanted.items() if k in params}


@functools.cache
def model_config(max_model_len: int = 2048) -> ModelConfig:
    """Built once: ModelConfig inspects the architecture in a subprocess (seconds)."""
    model_dir = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
    (model_dir / "config.json").write_text(json.dumps(TINY))
    return ModelConfig(
        **_kwargs(
            ModelConfig,
            model=str(model_dir),
            tokenizer=str(model_dir),
            skip_tokenizer_init=True,
            max_model_len=max_model_len,
            dtype="float32",
            seed=0,
        )
    )


def vllm_config(max_running: int, max_tokens: int, max_model_len: int = 2048) -> VllmConfig:
    model = model_config(max_model_len)
    if getattr(model, "use_async_output_proc", False):  # 0.10.2 asks the (absent) platform about it
        model.use_async_output_proc = False
    scheduler = SchedulerConfig(
        **_kwargs(
            SchedulerConfig,
            max_num_seqs=max_running,
            max_num_batched_tokens=max_tokens,
            max_model_len=max_model_len,
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
        )
    )
    cache = CacheConfig(
        **_kwargs(
            CacheConfig,
            block_size=BLOCK,
            gpu_memory_utilization=0.9,
            cache_dtype="auto",
            enable_prefix_caching=True,
        )
    )
    extra: dict[str, Any] = {}
    try:  # a CPU box with no vLLM platform cannot infer the device ("auto"): name it
        from vllm.config import DeviceConfig

        extra["device_config"] = DeviceConfig(device="cpu")
    except ImportError:
        pass
    return VllmConfig(model_config=model, scheduler_config=scheduler, cache_config=cache, **extra)


def kv_cache_config(num_blocks: int, *, hybrid: bool) -> KVCacheConfig:
    full = FullAttentionSpec(
        **_kwargs(
            FullAttentionSpec,
            block_size=BLOCK,
            num_kv_heads=1,
            head_size=16,
            dtype=torch.float32,
            use_mla=False,
        )
    )
    groups = [KVCacheGroupSpec(["layers.0.attn"], full)]
    if hybrid:
        mamba = MambaSpec(
            **_kwargs(
                MambaSpec,
                block_size=BLOCK,
                shapes=((16, 4), (16,)),
                dtypes=(torch.float32, torch.float32),
                mamba_cache_mode="align",
            )
        )
        groups.append(KVCacheGroupSpec(["layers.1.mixer"], mamba))
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups)


def make_scheduler(
    num_blocks: int = 400,
    *,
    hybrid: bool = False,
    max_running: int = 16,
    max_tokens: int = 512,
    max_model_len: int = 2048,
) -> Scheduler:
    config = vllm_config(max_running, max_tokens, max_model_len)
    config.cache_config.num_gpu_blocks = num_blocks
    if hybrid:
        config.cache_config.mamba_cache_mode = "align"  # type: ignore[attr-defined]
    init_none_hash(_hash_fn())
    kwargs = _kwargs(
        Scheduler,
        vllm_config=config,
        kv_cache_config=kv_cache_config(num_blocks, hybrid=hybrid),
        structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK,
        hash_block_size=BLOCK,
        log_stats=False,
    )
    return Scheduler(**kwargs)


def make_request(rid: str, prompt: list[int], max_tokens: int) -> Request:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    kwargs = _kwargs(
        Request,
        request_id=rid,
        prompt_token_ids=prompt,
        sampling_params=params,
        pooling_params=None,
        eos_token_id=EOS,
        block_hasher=get_request_block_hasher(BLOCK, _hash_fn()),
    )
    request = Request(**kwargs)
    return request


def step(sched: Scheduler, token: int = 7) -> Any:
    """One engine step: schedule, a made-up model output, update.  Returns the scheduler output."""
    out = sched.schedule()
    ids = list(out.num_scheduled_tokens)
    # a request still inside its prompt (a chunked prefill) samples nothing this step
    sampled = [
        [token] if sched.requests[rid].num_computed_tokens >= sched.requests[rid].num_tokens else []
        for rid in ids
    ]
    kwargs = _kwargs(
        ModelRunnerOutput,
        req_ids=ids,
        req_id_to_index={rid: i for i, rid in enumerate(ids)},
        sampled_token_ids=sampled,
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )
    sched.update_from_output(out, ModelRunnerOutput(**kwargs))
    return out


def abort(sched: Scheduler, rids: list[str]) -> None:
    from vllm.v1.request import RequestStatus

    sched.finish_requests(rids, RequestStatus.FINISHED_ABORTED)


def emit(check: str, ok: bool, **detail: Any) -> None:
    """One check's result, a JSON line on stdout (the pytest side reads them)."""
    print(json.dumps({"version": VERSION, "check": check, "ok": bool(ok), **detail}, default=str), flush=True)


class Ticks:
    """Every clock read is a second later: every sample is due, every census interval passes."""

    def __init__(self) -> None:
        self.now = time.monotonic()  # the probe's clock so far: its census timer started on it

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def run_checks(checks: Sequence[tuple[str, Callable[[], None]]], wanted: set[str]) -> int:
    """Run the named checks (all when ``wanted`` is empty); a check that raises is emitted as failed."""
    for name, fn in checks:
        if wanted and name not in wanted:
            continue
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:
            emit(name, False, error="".join(traceback.format_exception(exc))[-3000:])
        print(f"# {name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0
