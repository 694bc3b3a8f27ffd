"""Only tests marked ``process`` start other processes.

So ``-m "not process"`` is the quick loop it claims to be: a test that is not marked and
starts a subprocess or a multiprocessing worker fails at its teardown, naming the marker.
"""

from __future__ import annotations

import multiprocessing.process
import platform
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

# The first call in a process runs `uname -p` (the answer is kept): the openai client
# asks for it in its first request, whichever test makes that.
platform.processor()


@pytest.fixture(autouse=True)
def processes_only_where_marked(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    if request.node.get_closest_marker("process") is not None:
        yield
        return
    started: list[str] = []
    popen, start = subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start

    def noted_popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        started.append(f"a subprocess {args!r}")
        popen(self, args, *rest, **options)

    def noted_start(self: multiprocessing.process.BaseProcess) -> None:
        started.append(f"a multiprocessing worker {self.name!r}")
        start(self)

    monkeypatch.setattr(subprocess.Popen, "__init__", noted_popen)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", noted_start)
    yield
    if started:
        pytest.fail(f"this test started {started[0]}: mark it @pytest.mark.process", pytrace=False)
