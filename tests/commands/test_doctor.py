"""``poolwatch doctor`` names the fault of each broken set-up, from the engine's side or the
sidecar's, and finds none in a working one.

Real parts: a probe attached to the toy engine (its loopback endpoint, its discovery file, its
keeper), directories on disk with their real owners and modes, a real ``poolwatch serve`` for the
sidecar, and the doctor itself as a user runs it (a subprocess) for the sidecar's side.  Only
whether the engine's package is importable is told to the engine side (``find``): this venv has
no SGLang or vLLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.helpers import REPO, await_healthy, free_port, serve_argv

from poolwatch.commands.doctor.engine_side import engine_checks
from poolwatch.commands.doctor.report import Check, Fault, Status, exit_code
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from rigs.fakes.toy.engine import TOY
from rigs.fakes.toy.scheduler import ToyScheduler

VERIFIED_VLLM = "0.33.0"  # a release whose wheel the probe read
OLD_VLLM = "0.9.0"  # older than the first V1 family: the probe refuses it


def importable(_: str) -> object:
    return object()


@pytest.fixture
def probe_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory where one rank (the toy engine's) announced itself, answering on loopback."""
    directory = tmp_path / "probes"
    sched = ToyScheduler()
    attach(TOY, sched, ProbeConfig(sample_interval_s=0.0, directory=str(directory), worker="pod-a"))
    sched.step()  # the hooks: the probe has a snapshot to serve
    sched.idle()
    try:
        yield directory
    finally:
        detach(sched)


class Sidecar:
    """``poolwatch serve`` on a free loopback port with the given environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        quiet, full = subprocess.DEVNULL, {**os.environ, **env}
        self.proc = subprocess.Popen(serve_argv(self.port), env=full, stdout=quiet, stderr=quiet)
        if not await_healthy(self.url):
            raise AssertionError("the sidecar did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def doctor(*args: str, env: dict[str, str]) -> tuple[int, dict[str, object]]:
    """``poolwatch doctor --json ...`` as a user runs it, in the environment ``env`` alone."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("POOLWATCH_", "SGLANG_", "VLLM_"))}
    result = subprocess.run(
        [sys.executable, "-m", "poolwatch.cli", "doctor", "--json", *args],
        env={**clean, **env}, capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def faults(doc: dict[str, object]) -> dict[str, str]:
    checks = doc["checks"]
    assert isinstance(checks, list)
    return {c["fault"]: c["says"] for c in checks if c["status"] == "FAIL"}


def failed(checks: list[Check]) -> dict[Fault, Check]:
    return {c.fault: c for c in checks if c.status is Status.FAIL}


def engine_env(directory: Path, **extra: str) -> dict[str, str]:
    return {"POOLWATCH_PROBE_DIR": str(directory), "POOLWATCH_ENGINE_VERSION": VERIFIED_VLLM, **extra}


def engine_side(env: dict[str, str], sidecar: str = "") -> list[Check]:
    with httpx.Client(trust_env=False) as client:
        return engine_checks("vllm", env, client, sidecar=sidecar, find=importable, site_dirs=[])


def until_followed(env: dict[str, str], sidecar: str) -> list[Check]:
    """The engine side's checks once the sidecar had its first scans (it scans once a second)."""
    end = time.monotonic() + 30
    while True:
        checks = engine_side(env, sidecar)
        found = {c.step: c for c in checks}
        if found["discovered"].status is Status.OK or time.monotonic() > end:
            return checks
        time.sleep(0.5)


@pytest.mark.slow  # a real sidecar: seconds of start-up (the fast loop checks each fault without one)
def test_a_working_set_up_has_no_fault_from_either_side(probe_dir: Path) -> None:
    sidecar = Sidecar({"POOLWATCH_PROBE_DIR": str(probe_dir)})
    try:
        checks = until_followed(engine_env(probe_dir, POOLWATCH_PROBE="1"), sidecar.url)
        assert exit_code(checks) == 0, checks
        steps = {c.step: c.status for c in checks}
        assert steps["discovered"] is Status.OK, checks
        assert steps == {
            "installed": Status.OK,
            "release": Status.OK,
            "activated": Status.OK,
            "directory": Status.OK,
            "attached": Status.OK,
            "discovered": Status.OK,
            "scraped": Status.SKIP,
        }
        code, doc = doctor(
            "--side", "sidecar", "--sidecar", sidecar.url, env={"POOLWATCH_PROBE_DIR": str(probe_dir)}
        )
        assert code == 0, doc
        assert "pod-a/dp0-tp0-pp0" in json.dumps(doc)
    finally:
        sidecar.stop()


def test_no_consent_is_named_from_the_engine_side(probe_dir: Path) -> None:
    fault = failed(engine_side(engine_env(probe_dir)))[Fault.NO_CONSENT]
    assert fault.step == "activated"
    assert "no consent" in fault.says
    assert "POOLWATCH_PROBE=1" in fault.fix
    assert Fault.NO_CONSENT not in failed(engine_side(engine_env(probe_dir, POOLWATCH_PROBE="1")))
    restricted = failed(engine_side(engine_env(probe_dir, POOLWATCH_PROBE="1", VLLM_PLUGINS="lora")))
    assert "VLLM_PLUGINS=lora" in restricted[Fault.NO_CONSENT].says


def test_a_wrong_directory_is_named_from_the_sidecar_side(probe_dir: Path, tmp_path: Path) -> None:
    """The probe announces in one directory, the sidecar reads another (empty), or one not mounted."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    code, doc = doctor("--side", "sidecar", env={"POOLWATCH_PROBE_DIR": str(elsewhere)})
    assert code == 1
    says = faults(doc)["not_attached"]
    assert f"no rank announced itself in {elsewhere}" in says
    fix = next(c["fix"] for c in doc["checks"] if c["fault"] == "not_attached")  # type: ignore[attr-defined]
    assert "another directory" in fix
    code, doc = doctor("--side", "sidecar", env={"POOLWATCH_PROBE_DIR": str(tmp_path / "not-mounted")})
    assert "does not exist in the sidecar's filesystem" in faults(doc)["wrong_directory"]


@pytest.mark.slow  # a real sidecar: seconds of start-up
def test_a_wrong_directory_is_named_from_the_engine_side_by_the_sidecar_it_asks(
    probe_dir: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    sidecar = Sidecar({"POOLWATCH_PROBE_DIR": str(elsewhere)})
    try:
        checks = engine_side(engine_env(probe_dir, POOLWATCH_PROBE="1"), sidecar.url)  # it never follows it
        fault = failed(checks)[Fault.WRONG_DIRECTORY]
        assert fault.step == "discovered"
        assert f"follows none of the 1 rank(s) announced in {probe_dir}" in fault.says
        assert f"POOLWATCH_PROBE_DIR to {probe_dir}" in fault.fix
    finally:
        sidecar.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user's needs root")
def test_a_uid_mismatch_is_named_from_the_sidecar_side(probe_dir: Path) -> None:
    """The shipped layout with a non-root engine: the directory is the engine's user's, and the
    sidecar, another user, refuses it."""
    engine_uid = 4242
    os.chown(probe_dir, engine_uid, engine_uid)
    code, doc = doctor("--side", "sidecar", env={"POOLWATCH_PROBE_DIR": str(probe_dir)})
    assert code == 1
    says = faults(doc)["uid_mismatch"]
    assert f"owned by uid {engine_uid}" in says
    assert "the sidecar runs as uid 0" in says
    (check,) = [c for c in doc["checks"] if c["fault"] == "uid_mismatch"]  # type: ignore[attr-defined]
    assert f"uid {engine_uid}" in check["fix"]
    assert "runAsUser" in check["fix"]


def test_a_sidecar_not_reading_the_directory_is_named_from_the_sidecar_side(probe_dir: Path) -> None:
    """Another target set and no POOLWATCH_PROBE_DIR: the sidecar looks for no probe at all."""
    env = {"POOLWATCH_METRICS_URLS": "http://127.0.0.1:30000"}
    code, doc = doctor("--side", "sidecar", env=env)
    assert code == 1
    says = faults(doc)["sidecar_not_reading"]
    assert "reads no probe directory" in says
    assert "POOLWATCH_PROBE_DIR is empty" in says
    code, doc = doctor("--side", "sidecar", env={**env, "POOLWATCH_PROBE_DIR": str(probe_dir)})
    assert "sidecar_not_reading" not in faults(doc)


def test_an_unread_release_is_named_from_the_engine_side(probe_dir: Path) -> None:
    refused = failed(
        engine_side(engine_env(probe_dir, POOLWATCH_PROBE="1", POOLWATCH_ENGINE_VERSION=OLD_VLLM))
    )
    fault = refused[Fault.UNREAD_RELEASE]
    assert fault.step == "release"
    assert "refuses this vLLM" in fault.says
    assert OLD_VLLM in fault.says
    newer = engine_side(engine_env(probe_dir, POOLWATCH_PROBE="1", POOLWATCH_ENGINE_VERSION="9.0.0"))
    (warned,) = [c for c in newer if c.step == "release"]
    assert warned.status is Status.WARN
    assert warned.fault is Fault.UNREAD_RELEASE
    assert "never read" in warned.says


def test_the_report_names_each_step_its_fault_and_its_fix() -> None:
    text = subprocess.run(
        [sys.executable, "-m", "poolwatch.cli", "doctor", "--side", "sidecar"],
        env={**os.environ, "POOLWATCH_METRICS_URLS": "http://127.0.0.1:30000", "POOLWATCH_PROBE_DIR": ""},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert text.returncode == 1
    assert "FAIL  directory   the sidecar reads no probe directory" in text.stdout
    assert "[sidecar_not_reading]" in text.stdout
    assert "fix: set POOLWATCH_PROBE_DIR" in text.stdout
    assert text.stdout.rstrip().endswith("verdict: faults: sidecar_not_reading")
