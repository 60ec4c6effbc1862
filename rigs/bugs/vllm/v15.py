"""V15 (#55733): encoder-decoder models (Whisper).  After every decode step the scheduler frees
the request's encoder input again (its encoder-decoder branch fires whenever any token was
computed), and the encoder-decoder cache manager credits the input's size back to its free slots
each time: the encoder cache's free count climbs by the input's size a step, far past the cache's
size, and its admission check stops limiting anything.  No error.

vLLM's own ``Scheduler`` on a tiny Whisper config (no weights; vLLM's own Whisper processor sizes
the encoder cache), full attention plus a cross-attention group, 400 blocks; it picks its own
``EncoderDecoderCacheManager``.  One request carries one 30 s audio input (1500 encoder positions)
and decodes 20 tokens.  Unfixed in 0.34.0 (the fix is open): the control is the affected release
with the fix's idea applied, each (request, input) credited back once.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug
from rigs.bugs.vllm.shared import affected, record, started

__all__ = ["BUG", "run"]

BUG = Bug(
    id="V15",
    engine="vllm",
    title="encoder-decoder cache: an input's size credited back to the free slots at every decode step",
    issue="https://github.com/vllm-project/vllm/issues/55733",
    fix="https://github.com/vllm-project/vllm/pull/51228",
    bug_class="counter",
    affected="0.34.0",
    fixed="0.34.0+fix",
    trigger="Whisper: one audio request decodes 20 tokens; each step frees its encoder input again",
)
PROMPT = [50258, 50259, 50359, 50363]  # Whisper's start, language, task and no-timestamps tokens


def run(release: str) -> dict[str, Any]:
    from rigs.vllm.configs import Groups

    e, timeline = started(400, max_running=8, max_tokens=2048, max_model_len=448, model="whisper",
        prefix_caching=False, chunked=False, groups=Groups(cross=True),
    )  # fmt: skip
    cache = e.sched.encoder_cache_manager
    if not affected(release):
        _credit_once(cache)
    e.add("A", PROMPT, 20, mm_features=[_audio("A")])
    trace = []
    while e.sched.requests and e.steps < 40:
        e.step()
        trace.append(cache.num_free_slots)
        if cache.num_free_slots > cache.cache_size:
            timeline.wrong(
                e.steps,
                f"encoder input of A credited again: {cache.num_free_slots} free of {cache.cache_size}",
            )
    return record(timeline, release, cache_size=cache.cache_size, free_slots=trace[:3] + trace[-1:])


def _audio(rid: str) -> Any:
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange

    from rigs.vllm.configs import WHISPER_ENCODER, accepted

    return MultiModalFeatureSpec(
        **accepted(
            MultiModalFeatureSpec, data=None, modality="audio", identifier=f"audio-{rid}",
            mm_position=PlaceholderRange(offset=0, length=WHISPER_ENCODER), mm_hash=f"audio-{rid}",
        )
    )  # fmt: skip


def _credit_once(cache: Any) -> None:
    """The control (#51228's idea): the manager credits a (request, input) back once."""
    credited: set[tuple[str, int]] = set()
    free = cache.free_encoder_input

    def once(request: Any, input_id: int) -> None:
        if (request.request_id, input_id) not in credited:
            credited.add((request.request_id, input_id))
            free(request, input_id)

    cache.free_encoder_input = once
