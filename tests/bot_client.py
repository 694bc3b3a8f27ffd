"""Start and drive tests/bot_process.py: the one worker process of the multi-process and
command-line tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# What the worker runs with unless a test says otherwise: fast write-behind and retries,
# and lock waits long enough for several processes on one loaded machine.
DEFAULTS = {
    "STM_WRITE_BEHIND_SECONDS": "0.05",
    "STM_DELETE_RETRY_SECONDS": "0.05",
    "STM_BUSY_TIMEOUT_MS": "20000",
}


class BotProcess:
    """One bot process on ``database``, with no STM_* setting of the test's environment
    but ``DEFAULTS`` and ``settings`` (names without the ``STM_`` prefix, lower case)."""

    def __init__(
        self,
        database: str,
        cwd: Path = ROOT,
        test_env: dict[str, str] | None = None,
        **settings: object,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STM_")}
        env["PYTHONPATH"] = str(ROOT)
        env.update(test_env or {})  # the process's own test hooks (tests/bot_process.py)
        env.update(DEFAULTS)
        env["STM_DATABASE"] = database
        env.update({f"STM_{name.upper()}": str(value) for name, value in settings.items()})
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "bot_process.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
        )
        ready = self.read()
        assert ready.get("ready"), f"the bot process did not start: {ready}"
        self.origin = ready["origin"]

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the bot process exited ({self.proc.poll()})"
        answer: dict[str, Any] = json.loads(line)
        assert "error" not in answer, answer["error"]
        return answer

    def call(self, **cmd: Any) -> dict[str, Any]:
        self.send(**cmd)
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send(op="quit")
            self.proc.wait(timeout=30)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.stdout.close()
