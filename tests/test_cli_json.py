"""``--json`` means the same before the subcommand and after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stm import ShortTermMemory, STMConfig
from stm.cli import cli
from stm.testing import ctx, turn


@pytest.fixture
async def database(tmp_path: Path) -> str:
    path = str(tmp_path / "stm.sqlite3")
    async with ShortTermMemory.open(STMConfig(database=path)) as memory:
        here = ctx(42, 10, 100)
        await memory.capture(turn(here, "we plan a trip"))
        assert (await memory.run_tool(here, {"summary": "a trip"})).success
    return path


TTLS = ["--crude-ttl-hours", "12", "--summary-ttl-hours", "24"]
READS = [["stats"], ["show", "--user", "42"], ["export", "--user", "42"], ["check"],
         ["janitor", "--dry-run", *TTLS]]  # fmt: skip


@pytest.mark.parametrize("command", READS, ids=lambda c: c[0])
def test_json_after_the_command_is_the_same_as_before_it(database: str, command: list[str]):
    runner = CliRunner()
    before = runner.invoke(cli, ["--database", database, "--json", *command])
    after = runner.invoke(cli, ["--database", database, *command, "--json"])
    assert before.exit_code == after.exit_code == 0, after.output
    first, second = json.loads(before.output), json.loads(after.output)
    if command == ["stats"]:
        # Sizes and expiry counts are read twice; the shape and the counts match.
        assert first.keys() == second.keys() and first["entries"] == second["entries"]
    else:
        # An export is stamped with the time it was made, which two runs need not share.
        for answer in (first, second):
            if isinstance(answer, dict):
                answer.pop("exported_at", None)
        assert first == second


def test_json_after_a_destructive_command(database: str):
    result = CliRunner().invoke(
        cli, ["--database", database, "purge-user", "42", "--yes", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.output), dict)


def test_without_json_the_output_is_for_people(database: str):
    result = CliRunner().invoke(cli, ["--database", database, "stats"])
    assert result.exit_code == 0
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.output)
