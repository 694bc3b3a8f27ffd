"""How the test suite shares code: fixtures through conftest.py, test doubles from the
shipped ``stm.testing``, the rest from ``tests/helpers.py``; never by importing conftest,
which pytest loads as a plugin (a second import would make a second copy of it)."""

from __future__ import annotations

import ast
from pathlib import Path

import stm.testing

TESTS = Path(__file__).parent


def test_no_test_module_imports_conftest() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [node.module] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            if "conftest" in names:
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == [], "import from stm.testing or helpers instead: " + ", ".join(offenders)


def test_the_shipped_doubles_need_nothing_of_the_test_suite() -> None:
    source = ast.parse(Path(stm.testing.__file__).read_text())
    imported = {
        (node.module or "").split(".")[0]
        for node in ast.walk(source)
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name.split(".")[0]
        for node in ast.walk(source)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported <= {
        "__future__",
        "asyncio",
        "collections",
        "dataclasses",
        "time",
        "typing",
        "stm",
    }
    assert set(stm.testing.__all__) == {
        "Clock",
        "FaultyStore",
        "ManualScheduler",
        "ctx",
        "faulty_memory",
        "turn",
    }


def test_each_turn_note_has_one_writer() -> None:
    """The library's notes on a TurnContext (``_keys``, ``_shown``, ...) are each assigned
    in one module only, the one stm/inputs.py names."""
    from stm.inputs import TurnContext

    root = Path(stm.testing.__file__).parent
    writers: dict[str, set[str]] = {note: set() for note in TurnContext._notes}
    for path in sorted(root.rglob("*.py")):
        if path.name == "inputs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in writers:
                    writers[target.attr].add(str(path.relative_to(root)))
    assert all(len(modules) == 1 for modules in writers.values()), writers
