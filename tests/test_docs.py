"""The documentation names only what exists: every ``STM_*`` setting, ``python -m stm``
command and option, slash command and extra it names is in the code, and every setting
and slash command of the code is documented; the architecture page's walk-throughs name
only functions and methods that exist, and the guide's ``stm.testing`` example passes.

Read statically from the Markdown (docs/, the README and the benchmarks' README, which
the site shows; not the changelog, whose history may name what is gone); each check is
also run on a wrong name, so it can fail.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click
from discord import app_commands

from cogs.short_term_memory._cog import ShortTermMemoryCog
from stm import STMConfig
from stm.cli import cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        *(ROOT / "docs").rglob("*.md"),
        ROOT / "README.md",
        ROOT / "benchmarks" / "README.md",
    ]
)
SETTINGS_PAGE = ROOT / "docs" / "settings.md"
COMMANDS_PAGE = ROOT / "docs" / "commands.md"

# Variables of the test suite and the benchmarks, not of STMConfig: documented for whoever
# runs them, and found where the code reads them from the environment.
READERS = (ROOT / "tests", ROOT / "benchmarks")
READ_FROM_ENVIRONMENT = re.compile(
    r"""(?:environ(?:\.get)?\(?\[?|getenv\()\s*["'](STM_[A-Z0-9_]+)["']"""
)


@dataclass(frozen=True)
class Named:
    name: str
    where: str  # page:line

    def __str__(self) -> str:
        return f"{self.where}: {self.name}"


def _lines(pages: Iterable[Path]) -> Iterator[tuple[str, str]]:
    for page in pages:
        name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            yield f"{name}:{number}", line


# -- settings -------------------------------------------------------------------------
SETTING = re.compile(r"\bSTM_[A-Z0-9_]*[A-Z0-9]\b")


def settings_named(pages: Iterable[Path]) -> list[Named]:
    return [Named(m[0], where) for where, line in _lines(pages) for m in SETTING.finditer(line)]


def config_variables() -> set[str]:
    return {f"STM_{field.upper()}" for field in STMConfig.model_fields}


def suite_variables() -> set[str]:
    found: set[str] = set()
    for folder in READERS:
        for path in folder.rglob("*.py"):
            found.update(READ_FROM_ENVIRONMENT.findall(path.read_text(encoding="utf-8")))
    return found - config_variables()


def unknown_settings(named: Iterable[Named], known: set[str]) -> list[str]:
    return [str(n) for n in named if n.name not in known]


def settings_table(text: str) -> dict[str, str]:
    """The first two cells of each row of the settings page's table: variable -> default."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`STM_[A-Z0-9_]+`", cells[0]):
            rows[cells[0].strip("`")] = cells[1]
    return rows


def wrong_defaults(table: dict[str, str]) -> list[str]:
    """Rows whose default, when it is a plain value, is not the field's."""
    wrong = []
    for field, info in STMConfig.model_fields.items():
        cell = table.get(f"STM_{field.upper()}")
        if cell is None or info.default is None:
            continue
        shown = cell.strip("`").replace(",", "")
        if isinstance(info.default, bool | str):
            same = shown == str(info.default)
        else:
            try:
                same = float(shown) == float(info.default)
            except ValueError:
                continue  # described in words
        if not same:
            wrong.append(f"STM_{field.upper()}: the page says {cell}, the code {info.default!r}")
    return wrong


def test_every_setting_named_in_the_docs_exists() -> None:
    named = settings_named(PAGES)
    assert len({n.name for n in named}) > 15, "the pages' settings were not found"
    known = config_variables() | suite_variables()
    assert not unknown_settings(named, known), unknown_settings(named, known)


def test_every_setting_is_in_the_settings_table_with_its_default() -> None:
    table = settings_table(SETTINGS_PAGE.read_text(encoding="utf-8"))
    missing = sorted(config_variables() - set(table))
    assert not missing, f"not in docs/settings.md: {missing}"
    assert not set(table) - config_variables(), set(table) - config_variables()
    assert not wrong_defaults(table), wrong_defaults(table)


def test_the_settings_checks_can_fail() -> None:
    known = config_variables()
    assert not unknown_settings([Named("STM_CRUDE_TTL_HOURS", "x:1")], known)
    assert unknown_settings([Named("STM_CRUDE_TTL_HOUR", "x:1")], known) == [
        "x:1: STM_CRUDE_TTL_HOUR"
    ]
    right = {f"STM_{f.upper()}": f"`{i.default}`" for f, i in STMConfig.model_fields.items()}
    assert not wrong_defaults({**right, "STM_CACHE_MAX_KEYS": "100,000"})
    assert wrong_defaults({**right, "STM_MAX_CATEGORIES": "6"})
    assert wrong_defaults({**right, "STM_RENDER_MODE": "`supersede`"})
    table = settings_table("| `STM_DATABASE` | `x.db` | where |\n| STM_NOT | 1 | prose |\n")
    assert table == {"STM_DATABASE": "`x.db`"}


# -- the command line -----------------------------------------------------------------
INVOCATION = re.compile(r"python -m stm((?:[ \t]+[^\s`|\"'<>\]]+)*)")


def invocations(pages: Iterable[Path]) -> list[tuple[str, list[str]]]:
    """Each ``python -m stm ...`` of the pages: where, and its words after ``stm``."""
    return [
        (where, m[1].split()) for where, line in _lines(pages) for m in INVOCATION.finditer(line)
    ]


def _options(command: click.Command) -> dict[str, click.Parameter]:
    return {
        opt: param
        for param in command.params
        if isinstance(param, click.Option)
        for opt in (*param.opts, *param.secondary_opts)
    }


def cli_mistakes(found: Iterable[tuple[str, list[str]]], group: click.Group) -> list[str]:
    """Commands and options the pages name that the command line does not have."""
    mistakes = []
    group_options = _options(group)
    for where, words in found:
        command: click.Command | None = None
        allowed = group_options
        skip = False
        for word in words:
            if skip:
                skip = False
                continue
            if word.startswith("-"):
                name = word.split("=", 1)[0]
                option = allowed.get(name) or group_options.get(name)
                if option is None:
                    mistakes.append(f"{where}: {' '.join(words)}: no option {name}")
                    break
                skip = "=" not in word and not getattr(option, "is_flag", False)
                continue
            if command is None:
                if not re.fullmatch(r"[a-z][a-z-]*", word):
                    break  # prose after a bare ``python -m stm``
                command = group.commands.get(word)
                if command is None:
                    mistakes.append(f"{where}: python -m stm {word}: no such command")
                    break
                allowed = {**group_options, **_options(command)}
    return mistakes


def test_every_command_line_named_in_the_docs_exists() -> None:
    found = invocations(PAGES)
    commands = {words[0] for _, words in found if words and not words[0].startswith("-")}
    assert len(commands) >= 8, f"the pages' commands were not found: {commands}"
    assert not cli_mistakes(found, cli), cli_mistakes(found, cli)


def test_every_command_is_documented_in_operating() -> None:
    found = invocations([ROOT / "docs" / "operating.md"])
    named = {w for _, words in found for w in words if w in cli.commands}
    assert named == set(cli.commands), set(cli.commands) - named


def test_the_command_line_check_can_fail() -> None:
    assert not cli_mistakes(
        [("x:1", ["--json", "purge-user", "42", "--server", "1", "--yes"])], cli
    )
    assert cli_mistakes([("x:1", ["purge-users", "42"])], cli)
    assert cli_mistakes([("x:1", ["export", "--users", "42"])], cli)
    assert cli_mistakes([("x:1", ["--database", "x.db", "stat"])], cli)


# -- slash commands -------------------------------------------------------------------
SLASH = re.compile(r"`(/[a-z][^`]*)`")


def cog_commands() -> dict[str, set[str]]:
    """Every slash command of the cog by its full name, with its parameters' names."""
    found: dict[str, set[str]] = {}

    def walk(commands: Iterable[app_commands.Command | app_commands.Group], prefix: str) -> None:
        for command in commands:
            if isinstance(command, app_commands.Group):
                found[prefix + command.name] = set()
                walk(command.commands, f"{prefix}{command.name} ")
            else:
                found[prefix + command.name] = {p.name for p in command.parameters}

    walk(ShortTermMemoryCog.__cog_app_commands__, "")
    return found


def slash_named(text: str) -> list[tuple[str, set[str]]]:
    """Each slash command a code span names: its full names (``a|b`` naming several),
    and the parameters it names (``user:``, ``[everywhere:]``)."""
    named = []
    for match in SLASH.finditer(text):
        names, params = [""], set()
        for word in match[1].replace("\\|", "|").lstrip("/").split():
            word = word.strip("[]")
            if word.endswith(":"):
                params.add(word[:-1])
            else:
                names = [f"{n} {alt}".strip() for n in names for alt in word.split("|")]
        named.extend((name, params) for name in names)
    return named


def slash_mistakes(named: Iterable[tuple[str, set[str]]], cog: dict[str, set[str]]) -> list[str]:
    mistakes = []
    for name, params in named:
        if name not in cog:
            mistakes.append(f"/{name}: no such command")
        elif params - cog[name]:
            mistakes.append(f"/{name}: no parameter {sorted(params - cog[name])}")
    return mistakes


def test_every_slash_command_in_the_commands_page_exists() -> None:
    named = slash_named(COMMANDS_PAGE.read_text(encoding="utf-8"))
    assert len(named) > 10, "the page's commands were not found"
    assert not slash_mistakes(named, cog_commands()), slash_mistakes(named, cog_commands())


def test_every_slash_command_of_the_cog_is_on_the_commands_page() -> None:
    cog = cog_commands()
    leaves = {name for name in cog if not any(other.startswith(name + " ") for other in cog)}
    named = {name for name, _ in slash_named(COMMANDS_PAGE.read_text(encoding="utf-8"))}
    assert leaves <= named, sorted(leaves - named)


def test_the_slash_command_check_can_fail() -> None:
    cog = cog_commands()
    assert not slash_mistakes(slash_named("`/memory-settings categories list\\|add`"), cog)
    assert slash_mistakes(slash_named("`/memory forgets`"), cog)
    assert slash_mistakes(slash_named("`/purge-memory member:`"), cog)
    assert slash_mistakes(slash_named("`/memory-settings categories list\\|rename`"), cog)


# -- extras ---------------------------------------------------------------------------
EXTRA = re.compile(r"(?:\.|discord-stm)\[([a-z0-9_,-]+)\]")


def extras_named(pages: Iterable[Path]) -> list[Named]:
    return [
        Named(name, where)
        for where, line in _lines(pages)
        for m in EXTRA.finditer(line)
        for name in m[1].split(",")
    ]


def declared_extras() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return set(pyproject["project"]["optional-dependencies"])


def unknown_extras(named: Iterable[Named], declared: set[str]) -> list[str]:
    return [str(n) for n in named if n.name not in declared]


def test_every_extra_named_in_the_docs_exists() -> None:
    named = extras_named(PAGES)
    assert {"dev", "postgres", "metrics", "red", "docs"} <= {n.name for n in named}
    assert not unknown_extras(named, declared_extras()), unknown_extras(named, declared_extras())


def test_the_extras_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("pip install -e '.[dev,postgre]'\n\nor 'discord-stm[metric]'\n")
    named = extras_named([page])
    assert [n.name for n in named] == ["dev", "postgre", "metric"]
    assert [n.name for n in named if str(n) in unknown_extras(named, declared_extras())] == [
        "postgre",
        "metric",
    ]


# -- the guide's example of stm.testing -----------------------------------------------
def _example(page: Path, importing: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    (block,) = [b for b in blocks if importing in b]
    return block


async def test_the_guides_stm_testing_example_passes(tmp_path: Path) -> None:
    """The example of ``stm.testing`` in docs/guide.md runs, as written, and passes."""
    namespace: dict[str, object] = {}
    exec(
        compile(_example(ROOT / "docs" / "guide.md", "from stm.testing"), "guide", "exec"),
        namespace,
    )
    tests = {name: fn for name, fn in namespace.items() if name.startswith("test_")}
    assert len(tests) == 2, sorted(tests)
    for name, test in tests.items():
        folder = tmp_path / name
        folder.mkdir()
        await test(folder)  # type: ignore[operator]


# -- the code the architecture page names ---------------------------------------------
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SOURCES = ("stm", "cogs", "host")


@dataclass
class CodeIndex:
    names: set[str]  # functions, classes, module-level names, parameters
    members: set[str]  # Class.method, Class.attribute (self.x included)
    text: str  # every string constant, for SQL words and change kinds


@functools.cache
def code_index() -> CodeIndex:
    index = CodeIndex(set(), set(), "")
    strings: list[str] = []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    index.names.add(node.name)
                if isinstance(node, ast.arg):
                    index.names.add(node.arg)
                if isinstance(node, ast.Assign | ast.AnnAssign):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    index.names.update(t.id for t in targets if isinstance(t, ast.Name))
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    strings.append(node.value)
                if isinstance(node, ast.ClassDef):
                    index.members.update(f"{node.name}.{m}" for m in _members(node))
    index.text = "\n".join(strings)
    return index


def _members(cls: ast.ClassDef) -> Iterator[str]:
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                yield target.id
            elif (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                yield target.attr


def missing_code(text: str, index: CodeIndex) -> list[str]:
    """The code spans of ``text`` that name a method (``Class.method``), a function
    (``name(...)``, or a name with an underscore) or a module path (``stm.x.y``) the
    code does not have."""
    missing = []
    for span in sorted(set(re.findall(r"`([^`\n]+)`", text))):
        name = re.sub(r"\(.*\)$", "", span)
        if re.fullmatch(r"stm(\.\w+)+", name):
            known = _importable(name)
        elif re.fullmatch(r"[A-Z]\w*\.\w+", name):
            known = name in index.members
        elif re.fullmatch(r"[a-z_]\w*", name) and ("_" in name or span != name):
            known = _defined(name, index)
        else:
            continue  # not a name of the code (a setting, SQL, a command)
        if not known:
            missing.append(span)
    return missing


def _defined(name: str, index: CodeIndex) -> bool:
    return name in index.names or re.search(rf"\b{name}\b", index.text) is not None


def _importable(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_the_code_the_architecture_page_names_exists() -> None:
    """The walk-throughs name functions and methods; a rename must update them."""
    index = code_index()
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert len(re.findall(r"`[A-Z]\w*\.\w+", text)) > 40, "the walk-throughs were not found"
    assert not missing_code(text, index), missing_code(text, index)


def test_the_architecture_check_can_fail() -> None:
    index = code_index()
    named = "`Writer.submit_change`, `purge_user`, `settle(read)`, `stm.store.open_store`"
    assert not missing_code(named, index)
    assert missing_code("`Writer.submit_changes`", index) == ["Writer.submit_changes"]
    assert missing_code("`forget_users`", index) == ["forget_users"]
    assert missing_code("`settles(read)`", index) == ["settles(read)"]
    assert missing_code("`stm.store.open_stores`", index) == ["stm.store.open_stores"]


def test_every_public_name_of_stm_is_in_the_api_reference() -> None:
    """What ``stm`` exports is documented: each name appears in docs/reference."""
    import stm

    text = " ".join(p.read_text() for p in (ROOT / "docs" / "reference").glob("*.md"))
    missing = [name for name in stm.__all__ if f"stm.{name}" not in text]
    assert missing == [], f"not in docs/reference: {missing}"


def _loggers_in_code() -> set[str]:
    found = set()
    for folder in ("stm", "cogs"):
        for path in (ROOT / folder).rglob("*.py"):
            found |= set(re.findall(r'getLogger\("([\w.]+)"\)', path.read_text()))
    return found


def _loggers_in_table(text: str) -> set[str]:
    section = text.split("| logger | what logs there |", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `([\w.]+)` \|", section, flags=re.M))


def test_the_logger_table_is_the_loggers_the_code_uses() -> None:
    """The operating page's logger table names exactly the loggers the library and the cog
    log under, so an operator who configures one by the table gets its records."""
    table = _loggers_in_table((ROOT / "docs" / "operating.md").read_text())
    assert table == _loggers_in_code()
