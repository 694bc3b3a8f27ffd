"""Wheels of the distributions installed in this environment, so that a new venv gets the
project's dependencies without a network and without the base interpreter's packages.

Each distribution a requirement needs (with what it needs in turn) is packed back into a
wheel from the files its RECORD lists, so the new venv has exactly the versions the tests
run with. Files installed outside site-packages (console scripts) are left out: nothing
here runs them.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# What pip writes at install time; the installing pip writes its own.
_INSTALL_RECORDS = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def needed(requirements: Iterable[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions that ``requirements`` need, and theirs, for this
    interpreter (markers evaluated); each must be installed at a version they allow."""
    found: dict[str, importlib.metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        try:
            dist = found.get(name) or importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            raise AssertionError(f"{requirement} is needed but not installed here") from None
        assert requirement.specifier.contains(dist.version, prereleases=True), (
            f"{requirement} is needed, {dist.version} is installed"
        )
        found[name] = dist
        for wanted in ("", *sorted(requirement.extras)):
            if (name, wanted) not in done:
                done.add((name, wanted))
                todo += [(Requirement(r), wanted) for r in dist.requires or []]
    return sorted(found.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def pack(dist: importlib.metadata.Distribution, folder: Path) -> Path:
    """A wheel in ``folder`` holding what ``dist`` installed into site-packages."""
    name, version = dist.metadata["Name"], dist.version
    wheel_info = dist.read_text("WHEEL")
    tags = re.findall(r"^Tag: (\S+)$", wheel_info or "", re.M)
    assert tags and dist.files, f"{name} {version} was not installed from a wheel"
    escaped = re.sub(r"[-_.]+", "_", name)
    path = folder / f"{escaped}-{version}-{tags[0]}.whl"
    record: list[str] = []
    info_dir = ""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as wheel:
        for file in dist.files:
            parts = file.parts
            if parts[0] == ".." or "__pycache__" in parts:
                continue
            if parts[0].endswith(".dist-info"):
                info_dir = parts[0]
                if len(parts) == 2 and parts[1] in _INSTALL_RECORDS:
                    continue
            data = Path(str(dist.locate_file(file))).read_bytes()
            wheel.writestr(file.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{file.as_posix()},sha256={digest.decode()},{len(data)}")
        assert info_dir, f"{name} {version} lists no .dist-info folder"
        record.append(f"{info_dir}/RECORD,,")
        wheel.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return path


def build(requirements: Iterable[str], folder: Path) -> list[Path]:
    """Wheels in ``folder`` of everything ``requirements`` need, from this environment."""
    folder.mkdir(parents=True, exist_ok=True)
    return [pack(dist, folder) for dist in needed(requirements)]
