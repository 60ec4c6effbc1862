"""The target family: a scrape target poolwatch cannot read, as PoolwatchTargetDown.  Pure.

Judged on the evaluation timer from every target's health: failing for ``target_down_for`` seconds
-> a warning, labelled with the target, its source and the worker whose target it is (a crash of
that worker inhibits it); the timer's verdict is every instance of the alert.
"""

from __future__ import annotations

from poolwatch.detect.alert import Signal
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family, Judge, Tick, first_line, held, uses
from poolwatch.detect.schema import AlertDef, Mode, Scope, Severity

__all__ = ["FAMILY", "TARGET_DOWN", "TargetHealth"]

TARGET_DOWN = "PoolwatchTargetDown"


class TargetHealth(Judge):
    """The family's judge: every scrape target's health, on the timer."""

    def signals(self, tick: Tick) -> list[Signal] | None:
        if tick.targets is None:
            return None
        out = []
        for t in tick.targets:
            if t.up:
                continue
            ago = (
                "never succeeded"
                if t.last_success_at is None
                else f"last success {tick.now - t.last_success_at:.0f} s ago"
            )
            error = first_line(t.last_error) or "no answer"
            text = f"poolwatch cannot scrape {t.source} target {t.name} ({ago}): {error}."
            named = (("source", t.source), ("target", t.name), ("worker", t.worker))
            labels = tuple((k, v) for k, v in named if v)  # worker: a crash of it inhibits this alert
            wait = self.config.target_down_for
            out.append(Signal(TARGET_DOWN, t.name, Severity.WARNING, labels, text, 0.0, for_seconds=wait))
        return out


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    d = config.detector
    return (
        AlertDef(
            TARGET_DOWN,
            Scope.TARGET,
            Mode.TIMED,
            "poolwatch cannot scrape one of its targets.",
            "Every scrape of the target (probe endpoint, SGLang /metrics, log) has failed for a while.",
            (
                held(
                    Severity.WARNING,
                    "poolwatch_target_up == 0",
                    "poolwatch cannot scrape {{ $labels.source }} target {{ $labels.target }}.",
                    d,
                    d.target_down_for,
                ),
            ),
        ),
    )


FAMILY = Family(
    name="targets",
    title="Scrape targets",
    about="Whether the sidecar can read each of its targets (probe endpoints, the engines' /metrics, logs).",
    metrics=uses("poolwatch_target_up"),
    alerts=alerts,
    timed=TargetHealth,
)
