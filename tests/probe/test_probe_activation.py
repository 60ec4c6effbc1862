"""Activation with zero changes to SGLang: the post-import hook, the plugin and the .pth line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from poolwatch.probe.sglang import activate as act
from poolwatch.probe.sglang.hooks import probe_of, uninstall

PTH = Path(act.__file__).with_name("poolwatch-probe.pth")
SCHED_SOURCE = """
class Scheduler:
    def __init__(self):
        self.disaggregation_mode = None

    def recv_requests(self):
        return []
"""


@pytest.fixture
def fake_sglang(tmp_path: Path) -> Iterator[str]:
    """A throwaway module with a ``Scheduler`` class, importable once."""
    name = f"fake_sched_{os.getpid()}_{id(tmp_path)}"
    (tmp_path / f"{name}.py").write_text(SCHED_SOURCE)
    sys.path.insert(0, str(tmp_path))
    yield name
    sys.path.remove(str(tmp_path))
    module = sys.modules.pop(name, None)
    if module is not None:
        uninstall(module.Scheduler)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, act._PostImport)]


def test_activation_wraps_the_scheduler_class_when_its_module_is_first_imported(
    fake_sglang: str, tmp_path: Path
) -> None:
    env = {
        "POOLWATCH_PROBE_SERVE": "0",
        "POOLWATCH_PROBE_DIR": str(tmp_path),
        "POOLWATCH_SGLANG_VERSION": "0.5.4.post1",
    }
    assert act.activate(env, module=fake_sglang) is True
    module = __import__(fake_sglang)
    sched = module.Scheduler()
    probe = probe_of(sched)
    assert probe is not None
    assert not probe.config.serve
    sched.recv_requests()
    assert probe.seq == 1
    assert not any(isinstance(f, act._PostImport) for f in sys.meta_path)  # one-shot


def test_activation_of_an_already_imported_module_wraps_it_at_once(fake_sglang: str) -> None:
    module = __import__(fake_sglang)
    assert act.activate({"POOLWATCH_PROBE_SERVE": "0"}, module=fake_sglang)
    assert "__poolwatch_originals__" in module.Scheduler.__dict__


@pytest.mark.parametrize(
    "env", [{"POOLWATCH_PROBE_DISABLE": "1"}, {"POOLWATCH_PROBE_PORT_BASE": "not-a-port"}]
)
def test_the_kill_switch_and_a_bad_setting_leave_sglang_untouched(
    fake_sglang: str, env: dict[str, str]
) -> None:
    assert act.activate(env, module=fake_sglang) is False
    module = __import__(fake_sglang)
    assert "__poolwatch_originals__" not in module.Scheduler.__dict__


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"SGLANG_PLUGINS": "other"}, False),
        ({"SGLANG_PLUGINS": "other, poolwatch"}, True),
        ({"POOLWATCH_PROBE": "1"}, True),
    ],
)
def test_the_plugin_acts_only_when_named_or_asked_for(env: dict[str, str], wanted: bool) -> None:
    assert act._plugin_wanted(env) is wanted


def run_pth(env_extra: dict[str, str]) -> str:
    code = (
        "import sys\n"
        f"exec(open({str(PTH)!r}).read())\n"
        "print(sorted(m for m in sys.modules if m.startswith(('poolwatch', 'torch'))))\n"
        "print(any(type(f).__name__ == '_PostImport' for f in sys.meta_path))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLWATCH")} | env_extra
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout


def test_the_pth_line_imports_nothing_without_poolwatch_probe() -> None:
    assert run_pth({}) == "[]\nFalse\n"


def test_the_pth_line_arms_the_post_import_hook_with_poolwatch_probe_and_imports_no_torch() -> None:
    modules, armed = run_pth({"POOLWATCH_PROBE": "1"}).splitlines()
    assert "poolwatch.probe.sglang.activate" in modules
    assert "torch" not in modules
    assert armed == "True"


def test_arming_twice_installs_one_hook_and_the_import_still_works(fake_sglang: str) -> None:
    env = {"POOLWATCH_PROBE_SERVE": "0"}
    assert act.activate(env, module=fake_sglang)
    assert act.activate(env, module=fake_sglang)
    assert sum(isinstance(f, act._PostImport) for f in sys.meta_path) == 1
    module = __import__(fake_sglang)
    assert "__poolwatch_originals__" in module.Scheduler.__dict__
