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
    in one module only, the one stm/_inputs.py names."""
    from stm._inputs import TurnContext

    root = Path(stm.testing.__file__).parent
    writers: dict[str, set[str]] = {note: set() for note in TurnContext._notes}
    for path in sorted(root.rglob("*.py")):
        if path.name == "_inputs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in writers:
                    writers[target.attr].add(str(path.relative_to(root)))
    assert all(len(modules) == 1 for modules in writers.values()), writers


# What a host may import of the library: stm's own names and its public modules, and the
# cog's public packages. Every other module starts with an underscore (as httpx's do) and
# may change.
PUBLIC_MODULES = {"stm", "stm.testing", "stm.store", "stm.prometheus", "stm.cli"}
PUBLIC_COG_MODULES = {"short_term_memory", "testing", "red", "red.cogpath.shorttermmemory"}
# Pages written for the library's contributors, whose examples reach inside.
CONTRIBUTORS_PAGES = {"architecture.md", "extending-the-store.md", "changelog.md"}


def _is_public(module: str) -> bool:
    top, _, rest = module.partition(".")
    if top == "stm":
        return module in PUBLIC_MODULES
    if top in ("cogs", "discord_stm"):
        return not rest or rest in PUBLIC_COG_MODULES
    return True


def _private_imports(code: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(code, where)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [alias.name for alias in node.names], []
        else:
            continue
        for module in modules:
            if module.split(".")[0] not in ("stm", "cogs", "discord_stm"):
                continue
            if not _is_public(module) or any(name.startswith("_") for name in names):
                found.append(f"{where}:{node.lineno} {module} {names}")
    return found


def test_what_hosts_copy_imports_only_public_names() -> None:
    """The bundled bot and every Python block of the README and the user's pages import
    only what ``stm`` and the cog's packages export, so what a bot author copies keeps
    working across releases."""
    from docs_blocks import blocks

    root = TESTS.parent
    found = []
    for path in [root / "bot.py", *sorted((root / "host").rglob("*.py"))]:
        found += _private_imports(path.read_text(), str(path.relative_to(root)))
    pages = [root / "README.md"] + [
        page for page in sorted((root / "docs").glob("*.md")) if page.name not in CONTRIBUTORS_PAGES
    ]
    for page in pages:
        for block in blocks(page.read_text(), page.name):
            if block.language in ("python", "py"):
                found += _private_imports(block.code, str(block))
    assert found == [], found


def _public_modules_outside(package: Path, public: set[str]) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if parts[-1] in ("__init__", "__main__"):
            parts = parts[:-1]
        name = ".".join(parts)
        if name and name not in public and not any(part.startswith("_") for part in parts):
            found.append(f"{package.name}.{name}")
    return found


def test_only_the_public_modules_have_public_names() -> None:
    """Every module of ``stm`` and of the cog's package is either one of the public ones or
    starts with an underscore (its package, or itself): a new module is internal unless
    chosen."""
    library = Path(stm.testing.__file__).parent
    public = {module.partition(".")[2] for module in PUBLIC_MODULES}
    found = _public_modules_outside(library, public)
    found += _public_modules_outside(TESTS.parent / "cogs", PUBLIC_COG_MODULES)
    assert found == [], "start the module's name with an underscore: " + ", ".join(found)


def test_count_events_docstring_names_every_kind() -> None:
    """The public ``count_event`` lists the kinds it takes, which live in a private module."""
    from stm import ShortTermMemory
    from stm._metrics import DISCORD_EVENTS

    doc = ShortTermMemory.count_event.__doc__ or ""
    assert [kind for kind in DISCORD_EVENTS if f"``{kind}``" not in doc] == []
