"""stm/_redact.py: no password of a database URL survives redact_url or redact_text."""

from __future__ import annotations

import urllib.parse

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stm._redact import HIDDEN, redact_text, redact_url, url_secrets


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://bot:s3cret@db:5432/stm", "postgresql://bot:***@db:5432/stm"),
        ("postgresql://bot@db/stm?password=s3cret", "postgresql://bot@db/stm?password=***"),
        (
            "postgres://db/stm?sslmode=require&sslpassword=k3y&sslkey=/etc/key.pem",
            "postgres://db/stm?sslmode=require&sslpassword=***&sslkey=/etc/key.pem",
        ),
        ("postgresql://bot:p%40ss@[::1]:5/stm", "postgresql://bot:***@[::1]:5/stm"),
        ("postgresql://bot:pa/ss?@db/stm", "postgresql://bot:***@db/stm"),
        (
            "postgresql://h1,h2/stm?PassWord=x;search_path=s",
            "postgresql://h1,h2/stm?PassWord=***;search_path=s",
        ),
        ("postgresql://bot@db/stm?search_path=x", "postgresql://bot@db/stm?search_path=x"),
        ("postgresql://db/stm?pass%77ord=s3cret", "postgresql://db/stm?pass%77ord=***"),
        ("data/stm.sqlite3", "data/stm.sqlite3"),
        (":memory:", ":memory:"),
    ],
)
def test_known_forms(url: str, shown: str) -> None:
    """Each place a password can sit in a URL libpq or asyncpg accepts; file names and
    other parameters (sslkey names a file) stay as they are."""
    assert redact_url(url) == shown
    assert redact_url(shown) == shown  # idempotent


password = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=4, max_size=30
).filter(lambda p: p.strip() == p and HIDDEN not in p)


@settings(max_examples=400)
@given(
    password=password,
    where=st.sampled_from(["user-info", "password", "sslpassword", "both"]),
    quote=st.booleans(),
)
@example(password="s3cret@db/stm", where="user-info", quote=False)
def test_no_password_survives(password: str, where: str, quote: bool) -> None:
    """Whatever the password (quoted or not, holding '@', '/', '?', '&' or '#'), neither the
    redacted URL nor a message quoting the URL's secrets holds it."""
    written = urllib.parse.quote(password, safe="") if quote else password
    user_info = f"bot:{written}@" if where in ("user-info", "both") else "bot@"
    query = "search_path=s"
    if where in ("password", "sslpassword", "both"):
        key = "sslpassword" if where == "sslpassword" else "password"
        query = f"{key}={urllib.parse.quote(password, safe='')}&search_path=s"
    url = f"postgresql://{user_info}dbhost:5432/stm?{query}"
    shown = redact_url(url)
    for secret in {password, written, urllib.parse.quote(password, safe="")}:
        if secret not in "postgresql://bot@dbhost:5432/stm?search_path=s":
            assert secret not in shown, (url, shown)
    assert password in url_secrets(url)
    assert password not in redact_text(f"driver said: {url} / {password}", url)
