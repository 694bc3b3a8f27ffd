"""Database URLs as output may show them: without a password, wherever the URL holds one.

A PostgreSQL URL can carry a password in its user-info (``user:secret@host``)
and in its query (``?password=secret``, ``sslpassword=``), both of which libpq
and asyncpg accept. Every log line, error, CLI output and metric that names a
database shows ``redact_url(url)``, never the URL itself; ``redact_text``
also removes the URL's secrets from text a driver wrote (an exception's
message). Pure: no I/O.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["HIDDEN", "redact_text", "redact_url", "url_secrets"]

HIDDEN = "***"
# Query keys whose value is a secret: password, sslpassword, passwd, pwd, a token. Not
# sslkey or sslcert, which name files.
_SECRET_KEY = re.compile(r"pass|pwd|secret|token", re.IGNORECASE)
# Text shorter than this is not searched for in driver messages: hiding every "ab" would
# garble them, and such a password is no secret anyway.
_MIN_SCRUBBED = 4


def redact_url(url: str) -> str:
    """``url`` with every password replaced by ``***``; text that is not a URL unchanged."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url  # a file path, ':memory:'
    authority, tail = _split_authority(rest)
    user_info, at, host = authority.rpartition("@")
    if at:
        user, colon, _ = user_info.partition(":")
        authority = f"{user}:{HIDDEN}@{host}" if colon else f"{user}@{host}"
    path, question, query = tail.partition("?")
    query, hash_, fragment = query.partition("#") if question else ("", "", "")
    if not question:
        path, hash_, fragment = path.partition("#")
    shown = f"{scheme}{sep}{authority}{path}"
    if question:
        shown += question + _redact_query(query)
    if hash_:
        shown += hash_ + _redact_query(fragment)
    return shown


def url_secrets(url: str) -> list[str]:
    """The passwords ``url`` holds, as written and percent-decoded."""
    _, sep, rest = url.partition("://")
    if not sep:
        return []
    authority, tail = _split_authority(rest)
    found: list[str] = []
    user_info, at, _ = authority.rpartition("@")
    if at and ":" in user_info:
        found.append(user_info.partition(":")[2])
    query = tail.partition("?")[2]
    for part in re.split(r"[&#;]", query):
        key, equals, value = part.partition("=")
        if equals and _SECRET_KEY.search(urllib.parse.unquote_plus(key)):
            found.append(value)
    decoded = [urllib.parse.unquote_plus(s) for s in found] + [
        urllib.parse.unquote(s) for s in found
    ]
    return sorted({s for s in found + decoded if s}, key=len, reverse=True)


def redact_text(text: str, url: str) -> str:
    """``text`` without any of ``url``'s passwords (a driver may quote parts of the URL)."""
    for secret in url_secrets(url):
        if len(secret) >= _MIN_SCRUBBED:
            text = text.replace(secret, HIDDEN)
    return text


def _split_authority(rest: str) -> tuple[str, str]:
    """The authority (user-info and hosts) and what follows it (path, query, fragment).

    The user-info may hold ``/``, ``?`` or ``#`` unescaped (a careless password); the
    authority ends at the last ``@`` before the path, else at the first of those."""
    end = len(rest)
    for mark in "/?#":
        at = rest.find(mark)
        if at != -1:
            end = min(end, at)
    last_at = rest.rfind("@")
    if last_at >= end:
        # An '@' after the first '/': the password held the '/', or the path holds an '@'.
        # Only a user-info can hold ':' before the '@' with no '/' in the host part.
        host_part = rest[last_at + 1 :]
        host_end = len(host_part)
        for mark in "/?#":
            at = host_part.find(mark)
            if at != -1:
                host_end = min(host_end, at)
        end = last_at + 1 + host_end
    return rest[:end], rest[end:]


def _redact_query(query: str) -> str:
    parts = re.split(r"([&;])", query)
    for i in range(0, len(parts), 2):
        key, equals, _ = parts[i].partition("=")
        if equals and _SECRET_KEY.search(urllib.parse.unquote_plus(key)):
            parts[i] = f"{key}={HIDDEN}"
    return "".join(parts)
