"""The texts of purge previews and answers: the numbers they must say, in each place."""

from __future__ import annotations

from dataclasses import replace

from cogs.short_term_memory._describe import (
    describe_forget_done,
    describe_forget_preview,
    describe_purge_done,
    describe_purge_preview,
    describe_recent_purges,
)
from stm import PurgeImpact, RecentPurges

HERE, THERE = 100, 200


def impact(own: int, by_server: dict[int | None, int], distilled: dict[int | None, int]):
    return PurgeImpact(1, None, "direct", own, sum(by_server.values()), by_server, distilled)


def test_a_forget_preview_in_a_server_splits_this_server_from_elsewhere() -> None:
    text = describe_forget_preview(
        impact(3, {HERE: 1, THERE: 4}, {HERE: 400, THERE: 8}), here=HERE, seconds=120
    )
    assert "- your own entries: **3**" in text
    assert "the notes of **5** shared entries beyond your own" in text
    assert "**1** in this server (under 1% of what the bot remembers here); **4** elsewhere" in text
    assert "written while those words were shown" in text  # the direct policy's rule
    assert text.endswith("Nothing is erased until you press **Confirm** (within 2 minutes).")


def test_a_server_counted_only_up_to_a_bound_is_said_as_the_most_the_purge_clears() -> None:
    """A server held more distilled entries than were counted: its share is an upper
    bound, and said so; a server counted whole is said plainly."""
    base = impact(2, {HERE: 120, THERE: 3}, {HERE: 2_200, THERE: 6})
    bounded = replace(base, distilled_at_least=frozenset({HERE}))
    text = describe_forget_preview(bounded, here=HERE, seconds=120)
    assert "**120** in this server (at most 5% of what the bot remembers here)" in text
    plain = describe_forget_preview(base, here=HERE, seconds=120)
    assert "**120** in this server (5% of what the bot remembers here)" in plain


def test_impact_lines_say_when_a_server_was_counted_only_up_to_a_bound() -> None:
    from stm.cli._view import impact_json, impact_lines

    base = impact(0, {HERE: 12, THERE: 3}, {HERE: 1_200, THERE: 6})
    bounded = replace(base, distilled_at_least=frozenset({HERE}))
    lines = impact_lines(bounded, "direct")
    assert f"    server {HERE}: 12 of at least 1200 distilled entries (at most 1%)" in lines
    assert f"    server {THERE}: 3 of its 6 distilled entries (50%)" in lines
    by_server = {s["server_id"]: s for s in impact_json(bounded, "direct")["by_server"]}
    assert by_server[HERE]["at_least"] and not by_server[THERE]["at_least"]


def test_a_forget_preview_in_a_dm_counts_everything_and_nothing_shared_is_said() -> None:
    text = describe_forget_preview(impact(1, {HERE: 2}, {HERE: 4}), here=None, seconds=45)
    assert "**2** in all" in text and "within 45 seconds" in text
    shared_nothing = describe_forget_preview(impact(0, {}, {}), here=HERE, seconds=120)
    assert "- no shared notes: what others see stays as it is" in shared_nothing
    assert "none in this server" not in shared_nothing


def test_a_purge_preview_names_the_member_and_the_place() -> None:
    text = describe_purge_preview(
        impact(2, {THERE: 3}, {THERE: 6}), member="<@5>", here=HERE, everywhere=True, seconds=120
    )
    assert text.startswith("**This erases what the bot remembers about <@5> in every server")
    assert "none in this server; **3** elsewhere" in text
    complete = PurgeImpact(5, HERE, "complete", 0, 1, {HERE: 1}, {HERE: 2})
    text = describe_purge_preview(complete, member="<@5>", here=HERE, everywhere=False, seconds=120)
    assert "**1** shared entry beyond their own" in text
    assert "**1** in this server (50% of what the bot remembers here)" in text
    assert "or notes that may hold them" in text  # the complete policy's rule


def test_the_answers_say_what_went_in_words_that_count() -> None:
    assert describe_forget_done(impact(1, {HERE: 1}, {HERE: 5})).endswith(
        "in every server and DM: 1 entry of your own, your recent messages, and the notes "
        "of 1 shared entry."
    )
    assert describe_forget_done(None).endswith("in every server and DM.")
    assert describe_purge_done(
        impact(0, {HERE: 7}, {HERE: 9}), member="<@5>", everywhere=False
    ) == (
        "Done: short-term memory about <@5> is erased in this server: 0 entries of their own, "
        "their recent messages, and the notes of 7 shared entries."
    )


def test_recent_purges_are_said_with_where_the_counts_come_from() -> None:
    none = describe_recent_purges(RecentPurges(0, 0, 0, 86400.0, 0.25))
    assert none == (
        "Purges in the last 24 hours (counted by this bot process since it started): none "
        "cleared shared notes here."
    )
    some = describe_recent_purges(RecentPurges(4, 31, 1, 86400.0, 0.25))
    assert some.endswith(
        "4 cleared the notes of 31 shared entries here; 1 of them more than 25% of the "
        "server's memory at once."
    )
