"""A seeded request generator: log-normal prompt and output lengths, shared prefixes (cache
hits), prompts long enough to chunk, bursts separated by idle gaps, aborts, and a PD transfer
latency per request.  Pure and deterministic: the same seed gives the same requests."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from poolwatch_emulator.req import RequestSpec

__all__ = ["Workload", "WorkloadConfig"]


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """Traffic shape.  Rates are per simulated second; lengths in tokens."""

    rate: float = 6.0
    prompt_median: int = 600
    prompt_sigma: float = 0.9
    output_median: int = 160
    output_sigma: float = 0.8
    shared_prefixes: int = 8
    prefix_median: int = 900
    shared_fraction: float = 0.6
    followup_fraction: float = 0.25  # a new turn of a recent conversation (its prompt + more)
    abort_fraction: float = 0.03
    abort_within_s: float = 30.0
    burst_s: float = 900.0
    gap_s: float = 120.0
    transfer_latency_s: float = 0.05
    mm_fraction: float = 0.0  # requests that carry encoder inputs (images, or one audio clip)
    mm_items: int = 1  # images per multimodal request (spread over its prompt)
    mm_embeds: int = 256  # embeds per encoder input
    mm_images: int = 8  # distinct images the requests draw from (encoder-cache hits)
    mm_in_prompt: bool = True  # False: an encoder-decoder input before the prompt (offset 0, not shared)

    def check(self) -> None:
        if self.rate <= 0 or self.burst_s <= 0 or self.gap_s < 0:
            raise ValueError("workload: rate and burst_s must be > 0 and gap_s >= 0")
        fractions = (self.shared_fraction, self.abort_fraction, self.followup_fraction, self.mm_fraction)
        if not all(0 <= f <= 1 for f in fractions):
            raise ValueError("workload: the shared, followup, abort and mm fractions must be in [0, 1]")
        if min(self.mm_items, self.mm_embeds, self.mm_images) < 1:
            raise ValueError("workload: mm_items, mm_embeds and mm_images must be at least 1")
        if min(self.prompt_median, self.output_median, self.prefix_median) < 1:
            raise ValueError("workload: medians must be at least 1 token")


class Workload:
    """Arrivals as a Poisson process that is on for ``burst_s`` and off for ``gap_s``."""

    def __init__(self, config: WorkloadConfig, *, seed: int, max_prompt: int, max_output: int):
        config.check()
        self.config = config
        self.max_prompt, self.max_output = max_prompt, max_output
        self._rng = random.Random(seed)
        self._count = 0
        self._recent: list[tuple[int, ...]] = []
        rng = random.Random(seed ^ 0x5EED)
        self._prefixes = [
            tuple(
                range(
                    (i + 1) * 10_000_000,
                    (i + 1) * 10_000_000 + self._lognormal(rng, config.prefix_median, 0.4),
                )
            )
            for i in range(config.shared_prefixes)
        ]
        self._next = self._after(0.0)

    def _lognormal(self, rng: random.Random, median: int, sigma: float) -> int:
        return max(1, round(median * math.exp(rng.gauss(0.0, sigma))))

    def _after(self, t: float) -> float:
        """The next arrival after ``t``, skipping the idle gaps."""
        c = self.config
        t += self._rng.expovariate(c.rate)
        period = c.burst_s + c.gap_s
        if c.gap_s and t % period >= c.burst_s:
            t = (t // period + 1) * period
        return t

    @property
    def next_arrival(self) -> float:
        return self._next

    def arrivals_until(self, now: float) -> list[RequestSpec]:
        out = []
        while self._next <= now:
            out.append(self._make(self._next))
            self._next = self._after(self._next)
        return out

    def _make(self, at: float) -> RequestSpec:
        c, rng = self.config, self._rng
        self._count += 1
        prefix: tuple[int, ...] = ()
        if self._recent and rng.random() < c.followup_fraction:
            prefix = rng.choice(self._recent)
        elif self._prefixes and rng.random() < c.shared_fraction:
            prefix = rng.choice(self._prefixes)
        n = min(self._lognormal(rng, c.prompt_median, c.prompt_sigma), self.max_prompt)
        prefix = prefix[: max(0, self.max_prompt - n)]
        base = 1_000_000_000 + self._count * 100_000
        abort_at = at + rng.uniform(0.0, c.abort_within_s) if rng.random() < c.abort_fraction else None
        input_ids = prefix + tuple(range(base, base + n))
        self._recent = [*self._recent[-31:], input_ids]
        mm_items = self._mm_items(rng, len(input_ids)) if c.mm_fraction else ()
        return RequestSpec(
            rid=f"req-{self._count}",
            input_ids=input_ids,
            max_new_tokens=max(
                2, min(self._lognormal(rng, c.output_median, c.output_sigma), self.max_output)
            ),
            arrival=at,
            transfer_latency=c.transfer_latency_s * rng.uniform(0.5, 2.0),
            abort_at=abort_at,
            mm_items=mm_items,
        )

    def _mm_items(self, rng: random.Random, prompt: int) -> tuple[tuple[str, int, int], ...]:
        """The encoder inputs of one request: images spread over its prompt (placeholders of
        ``mm_embeds`` tokens each, drawn from ``mm_images`` distinct ones), or one encoder input
        before the prompt; none for a request the draw leaves text-only."""
        c = self.config
        if rng.random() >= c.mm_fraction:
            return ()
        if not c.mm_in_prompt:
            return ((f"audio-{self._count}", 0, c.mm_embeds),)
        k = min(c.mm_items, prompt // (2 * c.mm_embeds))
        return tuple((f"img-{rng.randrange(c.mm_images)}", i * prompt // k, c.mm_embeds) for i in range(k))
