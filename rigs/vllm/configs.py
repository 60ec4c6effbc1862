"""What vLLM's scheduler is built from, for this venv's release (run inside a release venv): a tiny
Llama's ``ModelConfig`` (a ``config.json`` in a temporary directory: no weights, no tokenizer, no
hub), the scheduler and cache configs, the KV cache groups (full attention, and a Mamba group in
vLLM's align mode), each constructor given the keywords its release takes (:func:`accepted`)."""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import tempfile
from pathlib import Path
from typing import Any

import torch
import vllm

from rigs.vllm.releases import Release, release

__all__ = ["BLOCK", "EOS", "RELEASE", "accepted", "kv_cache_config", "model_config", "sha256", "vllm_config"]

RELEASE: Release = release(vllm.__version__)
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


def accepted(cls: Any, **wanted: Any) -> dict[str, Any]:
    """Only the keyword arguments ``cls`` accepts in this release (field names move between releases)."""
    params = inspect.signature(cls).parameters
    return {k: v for k, v in wanted.items() if k in params}


def sha256() -> Any:
    return importlib.import_module(RELEASE.hashing).sha256


@functools.cache
def model_config(max_model_len: int = 2048) -> Any:
    """Built once: ModelConfig inspects the architecture in a subprocess (seconds)."""
    from vllm.config import ModelConfig

    model_dir = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
    (model_dir / "config.json").write_text(json.dumps(TINY))
    config = ModelConfig(
        **accepted(
            ModelConfig,
            model=str(model_dir),
            tokenizer=str(model_dir),
            skip_tokenizer_init=True,
            max_model_len=max_model_len,
            dtype="float32",
            seed=0,
        )
    )
    if RELEASE.async_output_proc:  # 0.10.2 asks the (absent) platform about it
        config.use_async_output_proc = False
    return config


def vllm_config(max_running: int, max_tokens: int, max_model_len: int = 2048) -> Any:
    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig

    scheduler = SchedulerConfig(
        **accepted(
            SchedulerConfig,
            max_num_seqs=max_running,
            max_num_batched_tokens=max_tokens,
            max_model_len=max_model_len,
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
        )
    )
    cache = CacheConfig(
        **accepted(
            CacheConfig,
            block_size=BLOCK,
            gpu_memory_utilization=0.9,
            cache_dtype="auto",
            enable_prefix_caching=True,
        )
    )
    # a CPU box with no vLLM platform cannot infer the device ("auto"): name it
    return VllmConfig(
        model_config=model_config(max_model_len),
        scheduler_config=scheduler,
        cache_config=cache,
        device_config=DeviceConfig(device="cpu"),
    )


def kv_cache_config(num_blocks: int, *, hybrid: bool) -> Any:
    """One full-attention group (and with ``hybrid`` a Mamba group, in vLLM's align mode)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec

    full = FullAttentionSpec(
        **accepted(
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
            **accepted(
                MambaSpec,
                block_size=BLOCK,
                shapes=((16, 4), (16,)),
                dtypes=(torch.float32, torch.float32),
                mamba_cache_mode="align",
            )
        )
        groups.append(KVCacheGroupSpec(["layers.1.mixer"], mamba))
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups)
