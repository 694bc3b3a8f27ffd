"""Every distribution the code imports is declared in pyproject.toml, for the part of the
repository that imports it.

Read statically: each file's imports come from its syntax tree and the declarations from
pyproject.toml, so nothing here is imported. The benchmark suite's peers (the ``bench``
extra) are checked without being installed. An import whose module is installed is
traced to the distribution that provides it (``importlib.metadata``), so a module that
is only there because something else pulls it in (``packaging`` through pytest, say)
counts as undeclared. Imports built from strings at run time are not seen.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent

# Where an import may come from, besides the core dependencies: the extra that installs
# each part. The library and the extension (stm/, cogs/) need only the core, except for
# imports they guard (see `undeclared`).
AREAS: dict[str, tuple[str, ...]] = {
    "stm": (),
    "cogs": (),
    "examples": (),
    "host": ("bot",),
    "bot.py": ("bot",),
    "tests": ("dev",),
    "benchmarks": ("bench",),
}
# Parts that run only where another extra is installed: the Red-DiscordBot cog package
# (``discord_stm.red``, for ``discord-stm[red]``) and the script the Red test runs in the
# venv it builds with that extra.
ONLY_WITH: dict[str, tuple[str, ...]] = {
    "cogs/red": ("red",),
    "tests/red_driver.py": ("red",),
}
# The tests run the bundled bot, both stores and the Prometheus adapter, so `dev` must
# install what each of these extras does.
EXERCISED_BY_THE_TESTS = ("bot", "postgres", "metrics")
# Modules whose distribution has another name, for when the distribution is not
# installed (when it is, its metadata says which modules it provides).
DISTRIBUTION_OF = {"discord": "discord.py", "dotenv": "python-dotenv", "redbot": "red-discordbot"}
# The repository's own top-level modules, and the installed name of cogs/.
FIRST_PARTY = {"stm", "cogs", "host", "bot", "tests", "benchmarks", "examples", "discord_stm"}


@dataclass(frozen=True)
class Import:
    module: str
    line: int
    guarded: bool  # inside ``try: ... except ImportError`` (or ModuleNotFoundError)


@dataclass(frozen=True)
class Declared:
    core: frozenset[str]
    extras: dict[str, frozenset[str]]

    def allowed(self, extras: tuple[str, ...]) -> frozenset[str]:
        return self.core.union(*(self.extras[name] for name in extras))

    def anywhere(self) -> frozenset[str]:
        return self.core.union(*self.extras.values())


def declared(pyproject: dict[str, object]) -> Declared:
    project = pyproject["project"]
    assert isinstance(project, dict)

    def names(requirements: list[str]) -> frozenset[str]:
        return frozenset(canonicalize_name(Requirement(r).name) for r in requirements)

    extras = project.get("optional-dependencies", {})
    return Declared(
        names(project.get("dependencies", [])),
        {extra: names(requirements) for extra, requirements in extras.items()},
    )


def _catches_import_errors(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    kinds = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return any(
        isinstance(kind, ast.Name) and kind.id in ("ImportError", "ModuleNotFoundError")
        for kind in kinds
    )


def imports(source: str) -> Iterator[Import]:
    """The absolute imports in ``source``, each with whether a handler guards it."""

    def walk(node: ast.AST, guarded: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno, guarded)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield Import(node.module, node.lineno, guarded)
        if isinstance(node, ast.Try | ast.TryStar):
            covered = guarded or any(_catches_import_errors(h) for h in node.handlers)
            for child in node.body:
                yield from walk(child, covered)
            for rest in (*node.handlers, *node.orelse, *node.finalbody):
                yield from walk(rest, guarded)
            return
        for child in ast.iter_child_nodes(node):
            yield from walk(child, guarded)

    yield from walk(ast.parse(source), False)


def candidates(module: str, installed: dict[str, list[str]]) -> set[str]:
    """The distributions that may provide ``module``: the installed ones that do, else
    the names it suggests (``langchain_core.messages`` -> langchain-core, ...)."""
    top = module.split(".")[0]
    if top in installed:
        return {canonicalize_name(d) for d in installed[top]}
    if top in DISTRIBUTION_OF:
        return {canonicalize_name(DISTRIBUTION_OF[top])}
    parts = module.split(".")
    return {canonicalize_name("-".join(parts[:n])) for n in range(1, len(parts) + 1)}


def undeclared(
    source: str,
    extras: tuple[str, ...],
    declarations: Declared,
    local: set[str],
    installed: dict[str, list[str]],
) -> list[Import]:
    """What ``source`` imports that nothing declares for a part installed with ``extras``.

    A guarded import may come from any extra: the code says what to install when the
    module is missing.
    """
    allowed, anywhere = declarations.allowed(extras), declarations.anywhere()
    found = []
    for imp in imports(source):
        top = imp.module.split(".")[0]
        if top in sys.stdlib_module_names or top in FIRST_PARTY or top in local:
            continue
        names = candidates(imp.module, installed)
        if not names & allowed and not (imp.guarded and names & anywhere):
            found.append(imp)
    return found


def explain(
    path: Path, imp: Import, declarations: Declared, installed: dict[str, list[str]]
) -> str:
    needs = " or ".join(("the core dependencies", *area_of(path)))
    names = candidates(imp.module, installed)
    hint = ""
    if names & declarations.anywhere():
        hint = " (another extra's: the import must catch ImportError)"
    what = f"{imp.module} ({' or '.join(sorted(names))})"
    return f"{path.relative_to(ROOT)}:{imp.line}: {what} is not in {needs}{hint}"


def area_of(path: Path) -> tuple[str, ...]:
    relative = path.relative_to(ROOT)
    for prefix, extras in ONLY_WITH.items():
        if relative.as_posix() == prefix or relative.as_posix().startswith(prefix + "/"):
            return (*AREAS[relative.parts[0]], *extras)
    return AREAS[relative.parts[0]]


def source_files() -> Iterator[Path]:
    for name in AREAS:
        path = ROOT / name
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in sorted(path.rglob("*.py")) if "__pycache__" not in p.parts)


def neighbours(path: Path) -> set[str]:
    """Modules a script may import from its own folder (it is first on sys.path)."""
    folder = path.parent
    return {p.stem for p in folder.glob("*.py")} | {
        p.name for p in folder.iterdir() if (p / "__init__.py").is_file()
    }


@pytest.fixture(scope="module")
def declarations() -> Declared:
    return declared(tomllib.loads((ROOT / "pyproject.toml").read_text()))


@pytest.fixture(scope="module")
def installed() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def test_every_import_is_declared_for_its_part(
    declarations: Declared, installed: dict[str, list[str]]
) -> None:
    files = list(source_files())
    assert len(files) > 100, "the repository's sources were not found"
    found = [
        explain(path, imp, declarations, installed)
        for path in files
        for imp in undeclared(
            path.read_text(), area_of(path), declarations, neighbours(path), installed
        )
    ]
    assert not found, "undeclared imports:\n" + "\n".join(found)


def test_dev_installs_what_the_tests_exercise(declarations: Declared) -> None:
    """``pip install -e '.[dev]'`` is enough to run every test."""
    dev = declarations.extras["dev"]
    for extra in EXERCISED_BY_THE_TESTS:
        assert declarations.extras[extra] <= dev, (extra, declarations.extras[extra] - dev)


# -- the check itself ---------------------------------------------------------------
PROJECT = {
    "project": {
        "dependencies": ["discord.py>=2.4,<3", "aiosqlite"],
        "optional-dependencies": {
            "postgres": ["asyncpg>=0.29"],
            "bench": ["matplotlib>=3.8", "langgraph-checkpoint-sqlite"],
            "dev": ["pytest"],
        },
    }
}
GUARDED = """
def driver():
    try:
        import asyncpg
    except ImportError as exc:
        raise RuntimeError("pip install 'x[postgres]'") from exc
    return asyncpg
"""
# As if only discord.py, aiosqlite, asyncpg and pytest were installed, with pytest's own
# dependency packaging.
INSTALLED = {
    "discord": ["discord.py"],
    "aiosqlite": ["aiosqlite"],
    "asyncpg": ["asyncpg"],
    "pytest": ["pytest"],
    "packaging": ["packaging"],
}


@pytest.mark.parametrize(
    ("source", "extras", "expected"),
    [
        ("import os, json\nfrom discord.ext import commands\nimport aiosqlite", (), []),
        ("import requests", (), ["requests"]),
        ("from packaging.version import Version", ("dev",), ["packaging"]),
        ("import pytest", ("dev",), []),
        ("import pytest", (), ["pytest"]),
        ("import asyncpg", (), ["asyncpg"]),  # an extra's module, unguarded
        (GUARDED, (), []),
        (GUARDED.replace("ImportError", "ValueError"), (), ["asyncpg"]),
        ("try:\n    import yaml\nexcept ImportError:\n    yaml = None", (), ["yaml"]),
        ("import matplotlib.pyplot as plt", ("bench",), []),  # not installed: by its name
        ("from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver", ("bench",), []),
        ("import matplotlib", ("dev",), ["matplotlib"]),
        ("from stm import STMConfig\nimport fakes", (), []),
        ("from . import sibling\nfrom .common import x", (), []),
    ],
)
def test_the_check_finds_undeclared_imports(
    source: str, extras: tuple[str, ...], expected: list[str]
) -> None:
    found = undeclared(source, extras, declared(PROJECT), {"fakes"}, INSTALLED)
    assert [imp.module.split(".")[0] for imp in found] == expected
