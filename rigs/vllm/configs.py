"""What vLLM's scheduler is built from, for this venv's release (run inside a release venv): a tiny
model's ``ModelConfig`` (a ``config.json`` in a temporary directory: no weights, no tokenizer, no
hub) -- a Llama, or a Whisper (an encoder-decoder: the encoder cache) --, the scheduler, cache and
speculative configs, the KV cache groups (full attention, and a Mamba group in vLLM's align mode, a
sliding-window group, a cross-attention group), each constructor given the keywords its release
takes (:func:`accepted`).

Kept whole: one release's config tree for one scheduler -- the model, scheduler, cache and
speculative configs and the KV cache groups are built together through :func:`accepted` from the
same release's signatures (the real-bug suite's vLLM entries import :class:`Groups` from here).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import vllm

from rigs.vllm.releases import Release, release

__all__ = [
    "BLOCK",
    "EOS",
    "RELEASE",
    "WHISPER_ENCODER",
    "Groups",
    "accepted",
    "kv_cache_config",
    "model_config",
    "sha256",
    "vllm_config",
]

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
WHISPER_ENCODER = 1500  # Whisper's encoder positions for 30 s of audio: one input's encoder-cache size
WHISPER = {
    "architectures": ["WhisperForConditionalGeneration"],
    "model_type": "whisper",
    "d_model": 64,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "vocab_size": 51865,
    "num_mel_bins": 80,
    "max_source_positions": WHISPER_ENCODER,
    "max_target_positions": 448,
    "pad_token_id": 50257,
    "bos_token_id": 50257,
    "eos_token_id": 50257,
    "decoder_start_token_id": 50258,
    "is_encoder_decoder": True,
    "torch_dtype": "float32",
}
WHISPER_AUDIO = {  # what WhisperMultiModalProcessor reads to size the encoder cache
    "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": 80,
    "hop_length": 160,
    "chunk_length": 30,
    "n_fft": 400,
    "n_samples": 480000,
    "nb_max_frames": 3000,
    "padding_side": "right",
    "padding_value": 0.0,
    "processor_class": "WhisperProcessor",
    "return_attention_mask": False,
    "sampling_rate": 16000,
}


def accepted(cls: Any, **wanted: Any) -> dict[str, Any]:
    """Only the keyword arguments ``cls`` accepts in this release (field names move between releases)."""
    params = inspect.signature(cls).parameters
    return {k: v for k, v in wanted.items() if k in params}


def sha256() -> Any:
    return importlib.import_module(RELEASE.hashing).sha256


@functools.cache
def model_config(max_model_len: int = 2048, model: str = "llama") -> Any:
    """Built once: ModelConfig inspects the architecture in a subprocess (seconds).  ``model``:
    ``llama``, or ``whisper`` (whose multimodal processor wants its preprocessor config and the
    tokenizer path initialised; no tokenizer file is read)."""
    from vllm.config import ModelConfig

    whisper = model == "whisper"
    model_dir = Path(tempfile.mkdtemp(prefix=f"tiny-{model}-"))
    (model_dir / "config.json").write_text(json.dumps(WHISPER if whisper else TINY))
    if whisper:
        (model_dir / "preprocessor_config.json").write_text(json.dumps(WHISPER_AUDIO))
    config = ModelConfig(
        **accepted(
            ModelConfig,
            model=str(model_dir),
            tokenizer=str(model_dir),
            skip_tokenizer_init=not whisper,
            max_model_len=max_model_len,
            dtype="float32",
            seed=0,
        )
    )
    if RELEASE.async_output_proc:  # 0.10.2 asks the (absent) platform about it
        config.use_async_output_proc = False
    return config


def vllm_config(
    max_running: int,
    max_tokens: int,
    max_model_len: int = 2048,
    *,
    model: str = "llama",
    prefix_caching: bool = True,
    chunked: bool = True,
    drafts: int = 0,
    async_scheduling: bool = False,
) -> Any:
    """``drafts``: speculative decoding with that many n-gram drafts a step (the drafter never
    runs: the scheduler's own placeholders, or drafts an entry hands the scheduler)."""
    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig

    scheduler = SchedulerConfig(
        **accepted(
            SchedulerConfig,
            max_num_seqs=max_running,
            max_num_batched_tokens=max_tokens,
            max_model_len=max_model_len,
            enable_chunked_prefill=chunked,
            is_encoder_decoder=False,
            # said, not left to the release's default (from 0.23 on where it can): the scheduler
            # class the driver steps must be the one EngineCore would pick for this config
            async_scheduling=async_scheduling,
        )
    )
    cache = CacheConfig(
        **accepted(
            CacheConfig,
            block_size=BLOCK,
            gpu_memory_utilization=0.9,
            cache_dtype="auto",
            enable_prefix_caching=prefix_caching,
        )
    )
    extra: dict[str, Any] = {}
    if drafts:
        from vllm.config import SpeculativeConfig

        # async scheduling refuses plain "ngram"; "ngram_gpu" builds on CPU (its drafter never runs)
        method = "ngram_gpu" if async_scheduling else "ngram"
        extra["speculative_config"] = SpeculativeConfig(
            **accepted(
                SpeculativeConfig,
                method=method,
                num_speculative_tokens=drafts,
                prompt_lookup_max=4,
                prompt_lookup_min=2,
            )
        )
    # a CPU box with no vLLM platform cannot infer the device ("auto"): name it
    return VllmConfig(
        model_config=model_config(max_model_len, model),
        scheduler_config=scheduler,
        cache_config=cache,
        device_config=DeviceConfig(device="cpu"),
        **extra,
    )


@dataclass(frozen=True)
class Groups:
    """The KV cache groups beside the full-attention one, and whether its tensors are described."""

    hybrid: bool = False  # a Mamba group in vLLM's align mode
    window: int = 0  # a sliding-window group of this many tokens
    cross: bool = False  # a cross-attention group (an encoder-decoder model)
    tensors: bool = False  # a KVCacheTensor per group (a connector sizing a host pool from them)


def kv_cache_config(num_blocks: int, *, hybrid: bool = False, groups: Groups | None = None) -> Any:
    """One full-attention group, and the groups of ``groups`` (``hybrid``: a Mamba group, in
    vLLM's align mode)."""
    from vllm.v1 import kv_cache_interface as kv
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec

    want = groups or Groups(hybrid=hybrid)
    attention = {
        "block_size": BLOCK,
        "num_kv_heads": 1,
        "head_size": 16,
        "dtype": torch.float32,
        "use_mla": False,
    }
    full = FullAttentionSpec(**accepted(FullAttentionSpec, **attention))
    specs: list[tuple[str, Any]] = [("layers.0.attn", full)]
    if want.window:
        swa = kv.SlidingWindowSpec(**accepted(kv.SlidingWindowSpec, sliding_window=want.window, **attention))
        specs.append(("layers.3.window_attn", swa))
    if want.cross:
        specs.append(
            ("layers.2.cross_attn", kv.CrossAttentionSpec(**accepted(kv.CrossAttentionSpec, **attention)))
        )
    groups_ = [KVCacheGroupSpec([name], spec) for name, spec in specs]
    tensors = [_tensor(name, spec, num_blocks) for name, spec in specs] if want.tensors else []
    if want.hybrid:
        mamba = MambaSpec(
            **accepted(
                MambaSpec,
                block_size=BLOCK,
                shapes=((16, 4), (16,)),
                dtypes=(torch.float32, torch.float32),
                mamba_cache_mode="align",
            )
        )
        groups_.append(KVCacheGroupSpec(["layers.1.mixer"], mamba))
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=groups_)


def _tensor(name: str, spec: Any, num_blocks: int) -> Any:
    from vllm.v1.kv_cache_interface import KVCacheTensor

    page = spec.page_size_bytes
    return KVCacheTensor(
        **accepted(
            KVCacheTensor,
            size=page * num_blocks,
            shared_by=[name],
            layers=[name],
            layer_stride=page * num_blocks,
            block_stride=page,
        )
    )
