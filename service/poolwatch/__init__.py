"""poolwatch: memory-pool conservation monitoring for LLM serving engines (SGLang, vLLM).

The public surface is small on purpose; everything else is private to its module.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
