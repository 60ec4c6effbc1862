"""The global ``ServerArgs`` an SGLang release's classes read, published as the scheduler process
publishes it (run in the release's venv)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rigs.sglang.releases import Release, ServerArgs

__all__ = ["DENSE", "MODEL", "publish_server_args", "published"]

MODEL = Path(__file__).resolve().parent / "tiny-qwen3-next"  # a weightless Qwen3-Next config
DENSE = Path(__file__).resolve().parent / "tiny-llama"  # a weightless Llama config (a dense model)


def publish_server_args(release: Release, **over: object) -> bool:
    """The global ``ServerArgs`` the release's classes read, as the scheduler process sets it:
    every field at its default (no ``__post_init__``: that would need a model), or on 0.5.23 one
    resolved against a weightless Qwen3-Next config (the unified tree reads the Mamba chunk size);
    ``over``: fields set on it (a step's server option: priority scheduling, streaming sessions).
    False where nothing was published (a release that reads none, 0.5.4.post1, and no ``over``)."""
    from sglang.srt import server_args as sa

    if release.server_args is ServerArgs.NONE and not over:
        return False
    if release.server_args is ServerArgs.RESOLVED:
        from sglang.srt import runtime_context

        fields: dict[str, object] = {
            "model_path": str(MODEL),
            "device": "cpu",
            "disable_overlap_schedule": True,
        }
        if "model_path" not in over:  # the weightless Qwen3-Next: its Mamba cache strategy
            fields["mamba_radix_cache_strategy"] = "no_buffer"
        # the step's options resolved with the rest (0.5.17 on refuses a field set after resolution)
        args = sa.ServerArgs(**{**fields, **over})
        sa.set_global_server_args_for_scheduler(args)
        if hasattr(runtime_context, "mamba_cache_chunk_size"):  # 0.5.23 resolves it once, here
            runtime_context.mamba_cache_chunk_size()
        return True
    args = sa.ServerArgs.__new__(sa.ServerArgs)
    for f in dataclasses.fields(sa.ServerArgs):
        if f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(args, f.name, f.default_factory())
    args.page_size = 1
    if isinstance(getattr(sa.ServerArgs, "mamba_cache_chunk_size", None), property):
        # 0.5.13's MambaRadixCache reads it at construction; the property would resolve a model
        # config, and the weightless Qwen3-Next's has no ``mamba_chunk_size``: the release's default
        args._mamba_cache_chunk_size = max(int(getattr(sa, "FLA_CHUNK_SIZE", 64)), args.page_size)
    for name, value in over.items():
        setattr(args, name, value)
    sa.set_global_server_args_for_scheduler(args)
    return True


def published() -> object:
    """The scheduler's published ``ServerArgs`` (from 0.5.20 the runtime context's
    ``get_server_args``: ``get_global_server_args`` is retired there)."""
    import importlib.util

    if importlib.util.find_spec("sglang.srt.runtime_context") is not None:
        from sglang.srt.runtime_context import get_server_args

        return get_server_args()
    from sglang.srt.server_args import get_global_server_args

    return get_global_server_args()
