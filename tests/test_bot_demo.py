"""``python bot.py --demo`` runs offline, shows every stage and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.process


def test_demo_runs_offline_and_shows_every_stage(tmp_path: Path) -> None:
    """The demo needs no token or network and tells the whole story."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISCORD_", "OPENAI_", "STM_"))}
    # An unroutable proxy: any attempt at the network would fail the run.
    env.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bot.py"), "--demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for stage in range(1, 7):
        assert f"=== {stage}." in out
    assert "shortterm:user:501:1101" in out and "shortterm:server:1100:1101" in out
    assert "model calls update_short_term_memory" in out
    # Stored distilled text is ciphertext, shown by its size beside what the library reads.
    assert "shortterm:server:1100:1101: summary encrypted, " in out
    assert '-> the library decrypts: "Recent topics:' in out
    assert "=b'" not in out and "\\x" not in out
    assert "<- ok:" in out
    assert "cleared the short-term memory of this channel" in out
    assert "Slow down" in out
    assert "erased in this server" in out
    after_restart = out.split("=== 6.")[1]
    assert "0 recent message(s)" in after_restart and "Cacilhas" in after_restart
    assert "Traceback" not in done.stderr
    # Nothing of the demo is left in the working directory: it used a temporary file.
    assert list(tmp_path.iterdir()) == []
