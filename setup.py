"""Ships ``poolwatch-probe.pth`` at the root of site-packages (everything else is in pyproject.toml).

Python runs a ``.pth`` file's ``import`` line at start-up in every process, SGLang's spawned
scheduler processes included: that is how the probe activates in an engine with no plugin framework
(SGLang older than 0.5.12), for every engine poolwatch knows.  The line does nothing unless
``POOLWATCH_PROBE=1``.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = Path(__file__).parent / "service" / "poolwatch" / "probe" / "poolwatch-probe.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(str(PTH), str(Path(self.build_lib) / PTH.name), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH.name)]


setup(cmdclass={"build_py": BuildPyWithPth})
