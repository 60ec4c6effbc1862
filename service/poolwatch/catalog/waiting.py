"""The metrics of what the conservation gap cannot see: capacity held by owners waiting on something
outside the step (stranded holds, by reason), the counter witness's drift, and the scheduler's
progress (admission stalls).  Part of :data:`poolwatch.catalog.ranks.RANKS`, in place."""

from __future__ import annotations

from poolwatch.catalog.spec import POOL_LABELS, RANK_LABELS, MetricSpec
from poolwatch.catalog.spec import counter as _c
from poolwatch.catalog.spec import gauge as _g

HOLDS: tuple[MetricSpec, ...] = (
    # --- holds: capacity kept by owners waiting on something outside the step (one series per reason) ---
    _g(
        "poolwatch_pool_hold_slots",
        "Slots held by owners that wait on something outside the scheduler's step, by what they wait for: "
        "kv_send (finished requests kept until their KV is sent), kv_recv (requests waiting for remote KV, "
        "aborted ones included), tree_lock (prefix-tree locks awaiting a host copy). Counted in the pool's "
        "gap as held: a stranded hold never shows as a leak.",
        (*POOL_LABELS, "reason"),
        "slots",
    ),
    _g(
        "poolwatch_pool_hold_owners",
        "Owners (requests, tree nodes) of each hold.",
        (*POOL_LABELS, "reason"),
    ),
    _g(
        "poolwatch_pool_hold_age_seconds",
        "Seconds the oldest owner of each hold had waited when the snapshot was taken.",
        (*POOL_LABELS, "reason"),
        "seconds",
    ),
    _g(
        "poolwatch_pool_hold_timeout_seconds",
        "The engine's own bound on that wait, read from its configuration (vLLM: the KV connector's "
        "kv_lease_duration, decoder_kv_blocks_ttl or VLLM_NIXL_ABORT_REQUEST_TIMEOUT; SGLang: "
        "SGLANG_DISAGGREGATION_WAITING_TIMEOUT); absent where the engine has none.",
        (*POOL_LABELS, "reason"),
        "seconds",
    ),
    _g(
        "poolwatch_pool_counter_drift_slots",
        "How far an engine counter is off from the probe's census, which counts the same quantity "
        "from the ids: the counter minus the census (signed). counter: the pool figure it feeds -- "
        "evictable, protected (SGLang's tree counters), available (vLLM's free-queue count). Absent while "
        "they agree; the pool's figures and gap are then the census's.",
        (*POOL_LABELS, "counter"),
        "slots",
    ),
)

PROGRESS: tuple[MetricSpec, ...] = (
    # --- scheduler progress (admission stalls) ---
    _c(
        "poolwatch_scheduler_admitted_total",
        "Requests the scheduler admitted to run since the probe started.",
        RANK_LABELS,
        "scheduler",
    ),
    _c(
        "poolwatch_scheduler_preemptions_total",
        "Requests the scheduler preempted (vLLM) since the probe started.",
        RANK_LABELS,
        "scheduler",
    ),
    _c(
        "poolwatch_scheduler_fruitless_preemptions_total",
        "Preemptions whose victim's capacity could not return at once (fenced by a step still in flight): "
        "recompute paid for no room.",
        RANK_LABELS,
        "scheduler",
    ),
    _g(
        "poolwatch_scheduler_waiting_admittable",
        "Waiting requests the scheduler could admit now (not those waiting for remote KV, a grammar or "
        "a streamed input).",
        RANK_LABELS,
        group="scheduler",
    ),
    _g(
        "poolwatch_scheduler_stalled_steps",
        "Step boundaries since the scheduler last made progress (admitted, computed or finished "
        "anything) while admittable requests waited; 0 while it moves.",
        RANK_LABELS,
        group="scheduler",
    ),
    _g(
        "poolwatch_scheduler_stalled_seconds",
        "Seconds the current stall had lasted when the snapshot was taken; 0 while the scheduler moves.",
        RANK_LABELS,
        "seconds",
        "scheduler",
    ),
)
