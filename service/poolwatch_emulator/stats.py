"""What a rank tells the world: SGLang's log lines and the values behind its ``/metrics`` gauges,
refreshed only when SGLang refreshes them (a prefill batch, every ``decode_log_interval`` decode
steps, every 30 s inside the idle check).  Formats per release: reference §5.3."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poolwatch_emulator.ownership import hybrid

if TYPE_CHECKING:
    from poolwatch_emulator.req import Req, ScheduleBatch

__all__ = ["SchedulerMetricsMixin"]

_GB = 1 << 30


class SchedulerMetricsMixin:
    def emu_logs_info(self: Any) -> bool:
        return bool(self.tp_rank == 0)

    def emu_emits_metrics(self: Any) -> bool:
        return bool(self.attn_tp_rank == 0 or self.server_args.enable_metrics_for_all_schedulers)

    def log_startup(self: Any) -> None:
        self.last_prefill_stats_tic = self.last_decode_stats_tic = self.clock.now
        self.emu_last_metrics_at = self.clock.now
        self.last_input_throughput = self.last_gen_throughput = 0.0
        self.emu_cache_hit_rate = 0.0
        self.metrics_sample: dict[str, float] = {}
        self.emu_refresh_metrics()
        if not self.emu_logs_info():
            return
        hp, size = hybrid(self.req_to_token_pool), self.max_total_num_tokens
        if hp is not None:
            self.logger.info(
                f"Mamba Cache is allocated. max_mamba_cache_size: {hp.mamba_pool.size}, "
                f"conv_state size: {hp.mamba_pool.size * 0.0016:.2f}GB, "
                f"ssm_state size: {hp.mamba_pool.size * 0.0703:.2f}GB "
            )
        self.logger.info(
            f"KV Cache is allocated. #tokens: {size}, K size: {size * 12288 / _GB:.2f} GB, "
            f"V size: {size * 12288 / _GB:.2f} GB"
        )
        self.logger.info("Memory pool end. avail mem=11.52 GB")
        sa = self.server_args
        self.logger.info(
            f"max_total_num_tokens={size}, chunked_prefill_size={sa.chunked_prefill_size}, "
            f"max_prefill_tokens=16384, max_running_requests={sa.max_running_requests}, "
            f"context_len={sa.context_length}, available_gpu_mem=11.52 GB"
        )

    def emu_usage(self: Any, decode: bool) -> tuple[int, float, str]:
        """(num_used_tokens, token_usage, the usage part of the log line)."""
        if self.emu_is_swa:
            fu, su, fr, sr, *_ = self._get_swa_token_info()
            text = f"#full token: {fu}, " if decode else ""
            text += f"full token usage: {fr:.2f}, "
            text += (
                f"#swa token: {su}, swa token usage: {sr:.2f}, " if decode else f"swa token usage: {sr:.2f}, "
            )
            return max(fu, su), max(fr, sr), text
        if self.emu_is_ssm:
            fu, mu, fr, mr, *_ = self._get_mamba_token_info()
            text = (
                f"#full token: {fu}, full token usage: {fr:.2f}, "
                if decode
                else f"full token usage: {fr:.2f}, "
            )
            text += f"mamba num: {mu}, mamba usage: {mr:.2f}, " if decode else f"mamba usage: {mr:.2f}, "
            return fu, fr, text
        used, usage, _, _ = self._get_token_info()
        return used, usage, (f"#token: {used}, " if decode else "") + f"token usage: {usage:.2f}, "

    def log_prefill_stats(
        self: Any, can_run: list[Req], new_tokens: int, hit_tokens: int, running_bs: int
    ) -> None:
        gap = self.clock.now - self.last_prefill_stats_tic
        self.last_prefill_stats_tic = self.clock.now
        self.last_input_throughput = new_tokens / gap if gap > 0 else 0.0
        total = new_tokens + hit_tokens
        self.emu_cache_hit_rate = hit_tokens / total if total else 0.0
        _, _, usage = self.emu_usage(decode=False)
        msg = (
            f"Prefill batch, #new-seq: {len(can_run)}, #new-token: {new_tokens}, "
            f"#cached-token: {hit_tokens}, "
            f"{usage}#running-req: {running_bs}, #queue-req: {len(self.waiting_queue)}, "
        )
        style, thr = self.release.log_style, f"input throughput (token/s): {self.last_input_throughput:.2f}"
        pd = f"#inflight-req: {len(self.disagg_prefill_inflight_queue)}, "
        boot = len(self.disagg_prefill_bootstrap_queue.queue)
        if style == "0.5.12":
            msg += f"#pending-token: {sum(len(r.origin_input_ids) for r in self.waiting_queue)}, "
            msg += f"#bootstrap-req: {boot}, {pd}" if self.is_prefill_mode else ""
            msg += f"cuda graph: False, {thr}"
        elif style == "0.5.9":
            msg += f"#prealloc-req: {boot}, {pd}" if self.is_prefill_mode else ""
            msg += f"{thr}, cuda graph: False"
        elif self.is_prefill_mode:
            msg += f"#prealloc-req: {boot}, {pd}{thr}, "
        self.emu_info(msg)
        self.emu_refresh_metrics(running_bs=running_bs)

    def log_decode_stats(self: Any, batch: ScheduleBatch) -> None:
        gap = self.clock.now - self.last_decode_stats_tic
        self.last_decode_stats_tic = self.clock.now
        self.last_gen_throughput = self.num_generated_tokens / gap if gap > 0 else 0.0
        self.num_generated_tokens = 0
        _, _, usage = self.emu_usage(decode=True)
        msg = f"Decode batch, #running-req: {len(batch.reqs)}, {usage}"
        if self.is_decode_mode:
            pre = (
                sum(len(d.req.fill_ids) for d in self.disagg_decode_transfer_queue.queue)
                / self.max_total_num_tokens
            )
            msg += f"pre-allocated usage: {pre:.2f}, "
            msg += f"#prealloc-req: {len(self.disagg_decode_prealloc_queue.queue)}, "
            msg += f"#transfer-req: {len(self.disagg_decode_transfer_queue.queue)}, "
            msg += f"#retracted-req: {len(self.disagg_decode_prealloc_queue.retracted_queue)}, "
        msg += f"cuda graph: True, gen throughput (token/s): {self.last_gen_throughput:.2f}, "
        msg += f"#queue-req: {len(self.waiting_queue)}" + (", " if self.release.log_style == "0.5.4" else "")
        self.emu_info(msg)
        self.emu_refresh_metrics(running_bs=len(batch.reqs))

    def emu_info(self: Any, message: str) -> None:
        if self.emu_logs_info():
            self.logger.info(message)

    def emu_maybe_log_idle_metrics(self: Any) -> None:
        if self.clock.now > self.emu_last_metrics_at + 30:
            self.last_gen_throughput = 0.0
            self.emu_refresh_metrics(running_bs=len(self.running_batch.reqs))

    def emu_refresh_metrics(self: Any, running_bs: int = 0) -> None:
        """Swap in a fresh dict of gauge values (never mutated afterwards: safe to read from the
        HTTP thread)."""
        self.emu_last_metrics_at = self.clock.now
        if not self.emu_emits_metrics():
            return
        used, usage, _ = self.emu_usage(decode=False)
        v: dict[str, float] = {
            "num_running_reqs": running_bs,
            "num_used_tokens": used,
            "token_usage": round(usage, 2) if self.release.log_style == "0.5.12" else usage,
            "gen_throughput": self.last_gen_throughput,
            "num_queue_reqs": len(self.waiting_queue),
            "num_grammar_queue_reqs": 0,
            "cache_hit_rate": self.emu_cache_hit_rate,
            "num_retracted_reqs": self.num_retracted_reqs,
            "num_paused_reqs": 0,
        }
        v.update(self.emu_pool_gauges())
        v.update(self.emu_pd_gauges())
        self.metrics_sample = v

    def emu_pool_gauges(self: Any) -> dict[str, float]:
        rel, v = self.release, {}
        if rel.has_max_total_gauge:
            v["max_total_num_tokens"] = float(self.max_total_num_tokens)
        if self.emu_is_swa:
            fu, su, fr, sr, fa, fe, sa, se = self._get_swa_token_info()
            v["swa_token_usage"] = sr
            raw = {"kv": (fa, fe, fu), "swa": (sa, se, su)}
        elif self.emu_is_ssm:
            fu, mu, fr, mr, fa, fe, ma, me = self._get_mamba_token_info()
            if rel.has_mamba_usage_gauge:
                v["mamba_usage"] = mr
            raw = {"kv": (fa, fe, fu), "mamba": (ma, me, mu)}
        else:
            fu, fr, fa, fe = self._get_token_info()
            raw = {"kv": (fa, fe, fu)}
        if rel.has_raw_pool_gauges:
            v["full_token_usage"] = fr
            for pool, (a, e, u) in raw.items():
                v[f"{pool}_available_tokens"], v[f"{pool}_evictable_tokens"], v[f"{pool}_used_tokens"] = (
                    a,
                    e,
                    u,
                )
            v["token_usage"] = round(
                max([fr] + [v[k] for k in ("swa_token_usage", "mamba_usage") if k in v]), 2
            )
        return v

    def emu_pd_gauges(self: Any) -> dict[str, float]:
        if self.is_prefill_mode:
            name = self.release.bootstrap_gauge.removeprefix("sglang:")
            return {
                name: len(self.disagg_prefill_bootstrap_queue.queue),
                "num_prefill_inflight_queue_reqs": len(self.disagg_prefill_inflight_queue),
            }
        if self.is_decode_mode:
            pre = sum(len(d.req.fill_ids) for d in self.disagg_decode_transfer_queue.queue)
            return {
                "num_decode_prealloc_queue_reqs": len(self.disagg_decode_prealloc_queue.queue),
                "num_decode_transfer_queue_reqs": len(self.disagg_decode_transfer_queue.queue),
                "pending_prealloc_token_usage": pre / self.max_total_num_tokens,
            }
        return {}
