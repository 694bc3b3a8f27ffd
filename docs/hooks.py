"""Build hook of the documentation site: links that leave docs/, and pages that show a
file from outside it.

The pages are written to read on the repository too, so they link where the files are:
``../benchmarks/README.md``, ``../stm/_memory.py``. On the site, a link to a file that a
page shows goes to that page, and a link to any other file of the repository becomes its
path in a code span (the site holds no source files); a link to a file the repository
does not have is a warning, which fails the strict build.

A page whose line reads ``--8<-- "CHANGELOG.md"`` (a path from the repository's root)
shows that file in its place, so the changelog and the benchmarks' README stay where
they are and are part of the site. Their links are written for where they live and are
made right for the page the same way; an image they show is copied into the site.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.plugins import get_plugin_logger
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

log = get_plugin_logger("outside-docs")

ROOT = Path(__file__).resolve().parent.parent
DOCS = "docs"

INCLUDE = re.compile(r'^--8<-- "(?P<path>[^"]+)"[ \t]*$', re.MULTILINE)
# An inline link or image: [text](target) or ![alt](target "title").
LINK = re.compile(r'(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?P<title>\s+"[^"]*")?\)')
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|#|/)", re.IGNORECASE)


def shown_by(files: Files) -> dict[str, str]:
    """Each file a page shows (its path from the root) -> that page (from docs/)."""
    shown: dict[str, str] = {}
    for page in files.documentation_pages():
        text = Path(page.abs_src_path or "").read_text(encoding="utf-8")
        for match in INCLUDE.finditer(text):
            shown[match["path"]] = page.src_uri
    return shown


def rewrite(
    text: str, source: str, page: str, shown: dict[str, str], assets: set[str], warn: bool = True
) -> str:
    """``text`` of the file ``source`` (from the root) with its links made right on the
    site's ``page`` (from docs/); the images it shows from outside docs/ go to ``assets``."""
    here, there = posixpath.dirname(source), posixpath.dirname(page) or "."

    def fix(match: re.Match[str]) -> str:
        target, text, bang = match["target"], match["text"], match["bang"]
        if EXTERNAL.match(target):
            return match[0]
        path, _, fragment = target.partition("#")
        anchor = f"#{fragment}" if fragment else ""
        resolved = posixpath.normpath(posixpath.join(here, path))
        if resolved.startswith(DOCS + "/"):
            new = posixpath.relpath(resolved[len(DOCS) + 1 :], there) + anchor
            return f"{bang}[{text}]({new}{match['title'] or ''})"
        if resolved in shown:
            new = posixpath.relpath(shown[resolved], there) + anchor
            return f"{bang}[{text}]({new}{match['title'] or ''})"
        if not (ROOT / resolved).exists():
            if warn:
                log.warning("%s links to %r, which the repository does not have", source, target)
            return match[0]
        if bang:
            assets.add(resolved)
            return f"![{text}]({posixpath.relpath(resolved, there)}{match['title'] or ''})"
        code = f"`{resolved}`"
        return code if text.strip("`") in (target, path, resolved, "") else f"{text} ({code})"

    out, fenced = [], False
    for line in text.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
        out.append(line if fenced else LINK.sub(fix, line))
    return "".join(out)


def expand(
    markdown: str, page: str, shown: dict[str, str], assets: set[str], warn: bool = True
) -> str:
    """The page's own links made right, and each file it shows put in its place."""

    def include(match: re.Match[str]) -> str:
        source = match["path"]
        path = ROOT / source
        if not path.is_file():
            if warn:
                log.warning("%s shows %r, which the repository does not have", page, source)
            return match[0]
        return rewrite(path.read_text(encoding="utf-8"), source, page, shown, assets, warn)

    own = rewrite(markdown, f"{DOCS}/{page}", page, shown, assets, warn)
    return INCLUDE.sub(include, own)


def on_files(files: Files, config: Any) -> Files:
    """Add the images that pages show from outside docs/, under their path from the root."""
    shown = shown_by(files)
    assets: set[str] = set()
    for page in files.documentation_pages():
        text = Path(page.abs_src_path or "").read_text(encoding="utf-8")
        expand(text, page.src_uri, shown, assets, warn=False)  # warned of as it is built
    for asset in sorted(assets):
        files.append(File(asset, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    return expand(markdown, page.file.src_uri, shown_by(files), set())
