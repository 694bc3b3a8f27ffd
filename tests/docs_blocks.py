"""Running the documentation's Python blocks: how a page's blocks are found, assembled
into the bot project a reader would write from them, and run against the installed
package (``discord_stm``, ``stm``), offline.

A block is one of three kinds, said by an HTML comment on the line before its fence:
``<!-- file: bot.py -->`` is a file of the reader's bot (written into its folder);
``<!-- not run: why -->`` is a fragment that is only compiled; a block without a
comment is a snippet, run top to bottom in one namespace per page (top-level ``await``
allowed). The ``test_*`` functions a snippet or a ``tests/`` file defines are run, each
in an empty folder passed as ``tmp_path`` when it takes it.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any

__all__ = ["Block", "blocks", "bot_project", "run_snippets", "run_tests", "write_files"]

_FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARKER = re.compile(r"<!--\s*(file|not run):\s*(.*?)\s*-->\s*$")
# The bot's own top-level modules, which a reader's tests import from the bot's folder.
OWN = ("bot", "cogs")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    code: str
    file: str | None = None  # where it goes in the bot's folder
    not_run: str | None = None  # why it is only compiled

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(text: str, page: str) -> list[Block]:
    """Every fenced block of ``text``, with the marker of the line before it."""
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        kind, value = (marker.group(1), marker.group(2)) if marker else (None, None)
        found.append(
            Block(
                page,
                line,
                match.group(1),
                match.group(2),
                file=value if kind == "file" else None,
                not_run=value if kind == "not run" else None,
            )
        )
    return found


def compiled(block: Block) -> CodeType:
    """The block as code (top-level ``await`` allowed); a syntax error names the block."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    return compile(block.code, str(block), "exec", flags=flags, dont_inherit=True)


def write_files(folder: Path, *pages: list[Block]) -> list[Path]:
    """Write the ``file:`` blocks of ``pages`` into ``folder`` (a later page's file of the
    same name replaces an earlier's), with an empty ``__init__.py`` in each package folder
    but ``tests`` (as the guide says); returns the files written."""
    written: dict[str, Path] = {}
    for page in pages:
        for block in page:
            if block.file is None:
                continue
            path = folder / block.file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.code, encoding="utf-8")
            written[block.file] = path
            package = path.parent
            if package != folder and package.name != "tests":
                (package / "__init__.py").touch()
    return list(written.values())


@contextlib.contextmanager
def bot_project(folder: Path) -> Iterator[None]:
    """Import the bot's own ``bot`` and ``cogs`` from ``folder``, as its pytest would with
    ``pythonpath = .``; this repository's ``cogs`` is set aside meanwhile and put back."""
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] in OWN}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        for name in [n for n in sys.modules if n.split(".")[0] in OWN]:
            del sys.modules[name]
        sys.modules.update(saved)


async def _call(test: Any, folder: Path) -> None:
    arguments = {}
    if "tmp_path" in inspect.signature(test).parameters:
        folder.mkdir(parents=True)
        arguments["tmp_path"] = folder
    result = test(**arguments)
    if inspect.isawaitable(result):
        await result


async def run_tests(path: Path, scratch: Path) -> list[str]:
    """Import the test file at ``path`` and run its ``test_*`` functions; their names."""
    spec = importlib.util.spec_from_file_location(f"docs_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names = [n for n in vars(module) if n.startswith("test_") and callable(getattr(module, n))]
    for name in names:
        await _call(getattr(module, name), scratch / f"{path.stem}-{name}")
    return names


async def run_snippets(page: list[Block], scratch: Path) -> list[str]:
    """Run the page's snippets in order in one namespace, then the tests they define."""
    namespace: dict[str, Any] = {"__name__": "docs_snippets"}
    for block in page:
        if block.file is not None or block.not_run is not None or block.language != "python":
            continue
        result = eval(compiled(block), namespace)  # the docs' own code
        if inspect.isawaitable(result):
            await result
    names = [n for n in namespace if n.startswith("test_") and callable(namespace[n])]
    for name in names:
        await _call(namespace[name], scratch / name)
    return names
