"""The global ``ServerArgs`` an SGLang release's classes read, published as the scheduler process
publishes it (run in the release's venv)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rigs.sglang.releases import Release, ServerArgs

__all__ = ["MODEL", "publish_server_args"]

MODEL = Path(__file__).resolve().parent / "tiny-qwen3-next"  # a weightless Qwen3-Next config


def publish_server_args(release: Release) -> None:
    """The global ``ServerArgs`` the release's classes read, as the scheduler process sets it:
    every field at its default (no ``__post_init__``: that would need a model), or on 0.5.23 one
    resolved against a weightless Qwen3-Next config (the unified tree reads the Mamba chunk size)."""
    from sglang.srt import server_args as sa

    if release.server_args is ServerArgs.NONE:
        return
    if release.server_args is ServerArgs.RESOLVED:
        from sglang.srt.runtime_context import mamba_cache_chunk_size

        args = sa.ServerArgs(
            model_path=str(MODEL),
            device="cpu",
            mamba_radix_cache_strategy="no_buffer",
            disable_overlap_schedule=True,
        )
        sa.set_global_server_args_for_scheduler(args)
        mamba_cache_chunk_size()
        return
    args = sa.ServerArgs.__new__(sa.ServerArgs)
    for f in dataclasses.fields(sa.ServerArgs):
        if f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(args, f.name, f.default_factory())
    args.page_size = 1
    sa.set_global_server_args_for_scheduler(args)
