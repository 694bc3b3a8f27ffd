"""STMConfig: defaults of the contract, environment variables, clear errors."""

from __future__ import annotations

import pytest
from helpers import Opener

from stm import ConfigError, STMConfig
from stm._config import MAX_TTL_HOURS
from stm.testing import Clock, ctx, turn


def test_defaults_match_the_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every documented default holds when nothing is set."""
    for name in list(__import__("os").environ):
        if name.startswith("STM_"):
            monkeypatch.delenv(name)
    c = STMConfig(_env_file=None)  # type: ignore[call-arg]
    assert c.database == "data/stm.sqlite3"
    assert (c.max_messages_per_channel, c.max_summary_length, c.max_categories) == (10, 1500, 5)
    assert (c.crude_ttl_hours, c.summary_ttl_hours) == (12, 24)
    assert (c.max_other_channels, c.refresh_cadence, c.crude_message_count) == (3, 5, 6)
    assert c.render_mode == "crude_summary"
    assert c.janitor_interval_minutes == 60


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """STM_<FIELD> sets each field."""
    monkeypatch.setenv("STM_MAX_MESSAGES_PER_CHANNEL", "4")
    monkeypatch.setenv("STM_RENDER_MODE", "supersede")
    monkeypatch.setenv("STM_SUMMARY_TTL_HOURS", "0.5")
    c = STMConfig()
    assert (c.max_messages_per_channel, c.render_mode, c.summary_ttl_hours) == (4, "supersede", 0.5)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("STM_MAX_MESSAGES_PER_CHANNEL", "0"),
        ("STM_RENDER_MODE", "everything"),
        ("STM_CRUDE_TTL_HOURS", "-1"),
        ("STM_SUMMARY_TTL_HOURS", "0"),
        ("STM_REFRESH_CADENCE", "often"),
        ("STM_JANITOR_INTERVAL_MINUTES", "0"),
    ],
)
def test_bad_values_fail_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """A bad value fails at start with a message that names the environment variable."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        STMConfig()


def test_config_error_is_a_value_error() -> None:
    """Hosts that catch ValueError catch configuration mistakes too."""
    with pytest.raises(ValueError, match="STM_MAX_CATEGORIES"):
        STMConfig(max_categories=0)


NUMERIC = [name for name, info in STMConfig.model_fields.items() if info.annotation in (int, float)]


@pytest.mark.parametrize("field", NUMERIC)
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e9", "1e300", "-1e300"])
def test_numbers_the_code_cannot_represent_fail_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, field: str, value: str
) -> None:
    """Every numeric setting refuses infinities, NaN and absurd sizes at start."""
    variable = f"STM_{field.upper()}"
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        STMConfig()


def test_every_numeric_setting_has_an_upper_bound() -> None:
    """A new numeric setting cannot be added without saying how large it may be."""
    assert "crude_ttl_hours" in NUMERIC and "cache_max_keys" in NUMERIC
    for name in NUMERIC:
        bounds = STMConfig.model_fields[name].metadata
        assert any(hasattr(b, "le") or hasattr(b, "lt") for b in bounds), name


async def test_the_longest_ttls_still_work(open_memory: Opener, clock: Clock) -> None:
    """At the largest TTLs accepted, expiry times are representable: get_entry answers."""
    memory = await open_memory(crude_ttl_hours=MAX_TTL_HOURS, summary_ttl_hours=MAX_TTL_HOURS)
    await memory.capture(turn(ctx(), "hello"))
    assert (await memory.run_tool(ctx(), {"summary": "S"})).success
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.expires_at.year > 2030
    clock.advance(hours=MAX_TTL_HOURS - 1)
    assert "S" in str(await memory.build_context(ctx(channel=10)))
