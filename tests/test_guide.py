"""The integration guide says what a bot author needs and cannot guess."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
GUIDE = (ROOT / "docs" / "guide.md").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.mark.parametrize("dependency", PROJECT["dependencies"])
def test_every_runtime_dependency_is_listed(dependency: str):
    name = Requirement(dependency).name
    assert re.search(rf"\b{re.escape(name)}\b", GUIDE.split("## 2.")[0]), name


@pytest.mark.parametrize("extra", ["postgres", "metrics", "red"])
def test_the_extras_a_bot_may_need_are_listed(extra: str):
    assert extra in PROJECT["optional-dependencies"]
    assert f"discord-stm[{extra}]" in GUIDE


def test_the_placement_rule_and_its_helper_are_stated():
    turn = GUIDE.split("## 3.")[1].split("## 4.")[0]
    assert "stm.place(messages, context)" in turn
    assert "Depth `-1`" in turn and "right after the system prompt" in turn
    assert "depth 0 goes after the last message" in turn


def test_the_intent_gate_and_its_flag_are_explained():
    assert "intent gate" in GUIDE.lower()
    assert "explicit_memory_intent = True" in GUIDE
    assert "user_text" in GUIDE


def test_what_a_tool_call_returns_is_explained():
    assert "ToolResult" in GUIDE and "`success`" in GUIDE and "`message`" in GUIDE


def test_each_model_apis_tool_form_is_named():
    for api in ("anthropic", "gemini"):
        assert f'definitions(ctx, api="{api}")' in GUIDE


def test_testing_offline_and_red_are_covered():
    assert "discord_stm.testing" in GUIDE and "offline_bot" in GUIDE
    assert "dpytest" in GUIDE
    assert "[p]load shorttermmemory" in GUIDE and "[p]slash enablecog discord_stm" in GUIDE
    for requester in ("discord_deleted_user", "owner", "user", "user_strict"):
        assert f"`{requester}`" in GUIDE
