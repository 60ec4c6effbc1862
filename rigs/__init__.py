"""The rigs: what the real-engine tiers, the guard checks, the benchmarks and the real-bug suite
drive, in one place that is neither ``tests/`` nor ``benchmarks/`` (both import it; it imports
neither).

* :mod:`rigs.venv` -- where a release runs (its cached venv, or an overlay on a neighbour's) and
  how to run a module of this checkout inside it;
* :mod:`rigs.checks` -- the one-JSON-line-per-check report a script inside a release venv prints;
* :mod:`rigs.timeline` -- a run recorded in engine steps: the first wrong act, the probe's finding,
  the page, the engine's own signal;
* :mod:`rigs.sglang` -- one driver over SGLang's release table (:mod:`rigs.sglang.releases`);
* :mod:`rigs.vllm` -- one driver over vLLM's release table, and the real vLLM CPU server;
* :mod:`rigs.stack` -- the deployed stack on loopback: Prometheus, Alertmanager, sidecars as the
  rendered manifests configure them;
* :mod:`rigs.fakes` -- stand-ins in no engine's venv: a clock moved by hand, SGLang's and vLLM's
  scheduler objects, a reference toy engine, and the engine contract's driver for each;
* :mod:`rigs.emulated` -- an emulated SGLang deployment under the real probe and the detector, and a
  fault-free soak of one (reading its logs with :mod:`rigs.log_records`);
* :mod:`rigs.neighbours` -- the hostile neighbour's and the hostile receivers' programs.

Every module here runs under this checkout's ``.venv`` or inside a release venv (``service/`` and
the checkout's root on ``PYTHONPATH``); the engine modules import their engine lazily or only in
the release venv.  A missing tool or venv raises :class:`rigs.venv.Unavailable` (tests turn it into
a skip, or a failure under ``POOLWATCH_REQUIRE_TOOLS=1``; benchmarks print it).
"""
