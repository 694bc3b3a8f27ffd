"""No resurrection: nothing deleted is ever visible again unless written after the delete.

A seeded scheduler runs batches of operations as concurrent tasks that race
(each waits a random number of event-loop turns first): captures, upgrades
(some after a build_context of the same turn), channel clears, user purges
with and without a server, reads; between batches, janitor passes after the
clock moves, flushes and restarts (close and reopen). The cache holds only a
few keys, so entries are evicted and hydrated again all the time.

Every text written is a unique token. Turns may carry messages of several
authors. A turn that built its prompt first copies the tokens its prompt
showed (other channels' recent messages and distilled memory) into its
summary or its reply, as the model would. A small model, written from the
contract and not from the code, says when a token dies:

- a channel clear kills every token of that channel written before it;
- a user purge (within its server, if it names one) kills the crude messages
  the user wrote or whose turn they triggered, and the summaries the user
  certainly contributed to: the upgrading user, turn users and authors of
  messages certainly in the window, turn users and authors of crude messages
  and contributors of summaries its prompt showed, and the contributors of
  the summary it certainly rolled over;
- inactivity past the longest TTL kills a key's tokens;
- a copy lives and dies with the summary or reply that holds it, and a turn
  whose prompt showed a token that a clear or purge killed before the turn's
  upgrade or capture was called is overtaken: its upgrade must be refused
  and its reply (which copied the token) never captured.

After every batch: no dead token in any cache entry, in what get_entry and
build_context returned, or (after a flush) in any database row; no token of
a refused upgrade or an overtaken reply anywhere. "Certainly" keeps the model
conservative: when it cannot be sure a user contributed, it does not demand
the summary go.

STM_STRESS=1 runs many more batches; STM_SEED replays one run.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import random
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import scaled, seed_for
from shredding import stored_rows

from stm import (
    DialogueMessage,
    DurabilityError,
    GenerationFinished,
    ShortTermMemory,
    STMConfig,
    TurnContext,
)
from stm.store import is_postgres_url, open_store
from stm.testing import Clock, FaultyStore

BOTH_STORES = True

TOKEN = re.compile(r"qz(\d+)x")
# A copy of token M held by the summary or reply H: ``qz{M}c{H}x``.
COPY = re.compile(r"qz(\d+)c(\d+)x")
USERS = (1, 2, 3)
SERVERS = {100: (10, 11, 12), 200: (20, 21)}
PRIVATE = {12}
CRUDE_TTL_HOURS, SUMMARY_TTL_HOURS = 1.0, 2.0
LONGEST_TTL = SUMMARY_TTL_HOURS * 3600
POLICIES = ("complete", "direct")


@dataclass
class Token:
    n: int
    kind: str  # "crude" or "summary"
    keys: tuple[str, ...]
    channel: int
    server: int | None
    user: int  # whose turn wrote it
    begin: int
    end: int | None = None
    status: str = "pending"  # "ok", "refused"
    # Per key: users certainly among the contributors of this summary there.
    contrib: dict[str, set[int]] = field(default_factory=dict)
    author: int | None = None  # who wrote a crude message (None: the bot)
    # Users whose words the turn's prompt certainly showed (crediting a summary).
    seen_users: set[int] = field(default_factory=set)


@dataclass
class Deletion:
    t: int
    kind: str  # "channel", "purge", "expire", "restart", "removed"
    channel: int | None = None
    user: int | None = None
    server: int | None = None
    key: str | None = None


def _at(event: Deletion) -> int:
    return event.t


def key_server(key: str) -> int | None:
    return int(key.split(":")[2]) if key.startswith("shortterm:server:") else None


def key_channel(key: str) -> int:
    return int(key.split(":")[3])


class Model:
    """What must be gone, from the contract's rules, under one erasure policy."""

    def __init__(self, erasure: str = "complete") -> None:
        self.erasure = erasure
        self.t = 0
        self.tokens: dict[int, Token] = {}
        self.events: list[Deletion] = []
        self.activity: dict[str, float] = {}
        self.key_servers: dict[str, int | None] = {}

    def tick(self) -> int:
        self.t += 1
        return self.t

    def server_of(self, key: str) -> int | None:
        """The server a key's entry belongs to: a user key of a server channel has one."""
        return self.key_servers.get(key, key_server(key))

    def token(self, kind: str, keys: tuple[str, ...], ctx: TurnContext) -> Token:
        n = len(self.tokens) + 1
        for key in keys:
            self.key_servers[key] = ctx.server_id
        token = Token(n, kind, keys, ctx.channel_id, ctx.server_id, ctx.user_id, self.tick())
        self.tokens[n] = token
        return token

    def applies(self, event: Deletion, key: str, *, window: bool) -> bool:
        """Does ``event`` break what is known about ``key``'s window (or distilled content)?"""
        if event.kind == "channel":
            return event.channel == key_channel(key)
        if event.kind == "purge":
            return event.server is None or event.server == self.server_of(key)
        if event.kind == "expire":
            return event.key == key
        if event.kind in ("restart", "removed"):
            return window and (event.key is None or event.key == key)
        return False

    def record(self, event: Deletion) -> None:
        assert not self.events or event.t >= self.events[-1].t, "events out of time order"
        self.events.append(event)

    def between(self, low: int, high: int, *, through: bool = False) -> list[Deletion]:
        """The events after ``low`` and before ``high`` (``through``: or at it). Events are
        recorded in the order of their times: a search, not a scan of every event."""
        start = bisect.bisect_right(self.events, low, key=_at)
        end = (bisect.bisect_right if through else bisect.bisect_left)(self.events, high, key=_at)
        return self.events[start:end]

    def broken(self, key: str, after: int, until: int, *, window: bool) -> bool:
        return any(self.applies(e, key, window=window) for e in self.between(after, until))

    def settle_upgrade(self, token: Token) -> None:
        """Work out who certainly contributed to a successful upgrade, per key."""
        assert token.end is not None
        for key in token.keys:
            certain = {token.user} | token.seen_users
            for other in self.tokens.values():
                if (
                    other.kind == "crude"
                    and other.status == "ok"
                    and key in other.keys
                    and other.end is not None
                    and other.end < token.begin
                    and not self.broken(key, other.end, token.end, window=True)
                ):
                    certain.add(other.user)
                    if other.author is not None:
                        certain.add(other.author)
            previous = self.previous_upgrade(token, key)
            if previous is not None:
                certain |= previous.contrib.get(key, set())
            token.contrib[key] = certain

    def previous_upgrade(self, token: Token, key: str) -> Token | None:
        """The summary ``token`` certainly rolled over on ``key``, if one is certain."""
        assert token.end is not None
        done = [
            u
            for u in self.tokens.values()
            if u.kind == "summary" and key in u.keys and u.status == "ok" and u is not token
            and u.end is not None and u.end < token.begin
        ]  # fmt: skip
        if not done:
            return None
        previous = max(done, key=lambda u: u.end or 0)
        assert previous.end is not None
        others = [
            u
            for u in self.tokens.values()
            if u.kind == "summary" and key in u.keys and u is not token and u is not previous
            and u.begin < token.end and (u.end is None or u.end > previous.begin)
        ]  # fmt: skip
        # From the previous upgrade's beginning: a delete while it ran may have landed
        # after its commit, and then this one rolled over nothing.
        if others or self.broken(key, previous.begin, token.end, window=False):
            return None
        return previous

    def dead(self, token: Token, key: str, at: int) -> bool:
        """Is ``token`` certainly gone from ``key`` at time ``at``?"""
        for event in self.between(token.begin, at, through=True):
            if event.kind == "channel" and event.channel == token.channel:
                return True
            if event.kind == "expire" and event.key == key:
                return True
            if event.kind == "purge" and event.server in (None, self.server_of(key)):
                if token.kind == "crude" and event.user in (token.user, token.author):
                    return True
                if token.kind == "summary" and event.user in token.contrib.get(key, set()):
                    return True
        return False

    def violations(self, text: str, keys: list[str], at: int, where: str) -> list[str]:
        """Tokens in ``text`` (read from one of ``keys``) that must not be there."""
        found = []
        matches = [(m.group(), int(m.group(1))) for m in TOKEN.finditer(text)]
        # A copy is judged as the summary or reply that holds it.
        matches += [(m.group(), int(m.group(2))) for m in COPY.finditer(text)]
        for shown, n in matches:
            token = self.tokens[n]
            if token.status == "refused":
                found.append(f"refused or overtaken {shown} visible in {where}")
                continue
            candidates = [k for k in token.keys if k in keys] or list(token.keys)
            if all(self.dead(token, k, at) for k in candidates):
                found.append(f"dead {token.kind} {shown} visible in {where}")
        return found

    def killed_between(self, token: Token, key: str, low: int, high: int) -> bool:
        """Did a clear or purge certainly kill ``token`` (as shown from ``key``) in (low, high)?"""
        for event in self.between(low, high):
            if event.kind == "channel" and event.channel == token.channel:
                return True
            if event.kind == "purge" and event.server in (None, self.server_of(key)):
                if token.kind == "crude" and event.user in (token.user, token.author):
                    return True
                if token.kind == "summary" and event.user in token.contrib.get(key, set()):
                    return True
        return False

    def deleted_between(self, low: int, high: int) -> bool:
        return any(e.kind in ("channel", "purge") for e in self.between(low, high))

    def seen(self, text: str, ctx: TurnContext) -> list[tuple[Token, str]]:
        """The tokens a prompt showed, each with the key it was shown from."""
        scope = "user" if ctx.server_id is None else "server"
        found = []
        for match in TOKEN.finditer(text):
            token = self.tokens[int(match.group(1))]
            keys = [k for k in token.keys if k.split(":")[1] == scope]
            if keys and token.status != "refused":
                found.append((token, keys[0]))
        return found

    def credit(self, holder: Token, seen: list[tuple[Token, str]]) -> None:
        """The users a summary certainly owes to what its prompt showed: under ``direct``,
        another channel's notes pass nothing on (only this channel's own notes do)."""
        for token, key in seen:
            if token.kind == "crude":
                holder.seen_users.add(token.user)
                if token.author is not None:
                    holder.seen_users.add(token.author)
            elif self.erasure == "complete" or key_channel(key) == holder.channel:
                holder.seen_users |= token.contrib.get(key, set())

    def overtaken(self, seen: list[tuple[Token, str]], low: int, high: int) -> bool:
        """Was a token the prompt showed certainly killed before the turn went on?"""
        return any(self.killed_between(token, key, low, high) for token, key in seen)


@contextlib.asynccontextmanager
async def write_lock_held(database: str) -> AsyncIterator[None]:
    """Another connection holds what every writing batch needs until the block ends: the
    SQLite file's write lock, or on PostgreSQL the feed's counter row."""
    if not is_postgres_url(database):
        with contextlib.closing(sqlite3.connect(database, timeout=5)) as lock:
            lock.execute("BEGIN IMMEDIATE")
            try:
                yield
            finally:
                lock.rollback()
        return
    import asyncpg

    conn = await asyncpg.connect(database)
    try:
        transaction = conn.transaction()
        await transaction.start()
        await conn.execute("SELECT 1 FROM stm_feed WHERE id = 1 FOR UPDATE")
        try:
            yield
        finally:
            await transaction.rollback()
    finally:
        await conn.close()


class Run:
    """One seeded run against one database."""

    def __init__(
        self, database: str, seed: int, erasure: str = "complete", journal: Path | None = None
    ) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.clock = Clock(1_700_000_000.0)
        self.config = STMConfig(
            database=database,
            journal=None if journal is None else str(journal),
            cache_max_keys=6,
            max_messages_per_channel=1000,
            crude_ttl_hours=CRUDE_TTL_HOURS,
            summary_ttl_hours=SUMMARY_TTL_HOURS,
            max_other_channels=3,
            write_behind_seconds=0.01,
            delete_retry_seconds=0.01,
            janitor_interval_minutes=10_000,
            busy_timeout_ms=50,  # a restart with the database locked gives up quickly
            erasure=erasure,
        )
        self.database = database
        self.model = Model(erasure)
        self.memory: ShortTermMemory | None = None
        self.batches = self.operations = self.restarts = 0
        self.pending_restarts = self.poisons = 0
        self.failures: list[str] = []

    # -- the memory under test ------------------------------------------------
    async def open(self) -> None:
        memory = await ShortTermMemory.open(self.config, clock=self.clock)
        remove = memory.cache.remove
        model = self.model

        def observed_remove(key: str) -> object:
            # Every drop of a key from the cache (eviction, clear, expiry) loses its crude
            # window: the model stops assuming what was in it.
            model.record(Deletion(model.tick(), "removed", key=key))
            return remove(key)

        memory.cache.remove = observed_remove  # type: ignore[method-assign]
        self.memory = memory

    @property
    def m(self) -> ShortTermMemory:
        assert self.memory is not None
        return self.memory

    def context(self) -> TurnContext:
        user = self.rng.choice(USERS)
        persona = 5 if self.rng.random() < 0.2 else None
        if self.rng.random() < 0.2:
            return TurnContext(user_id=user, channel_id=90 + user, persona_id=persona)
        server = self.rng.choice(list(SERVERS))
        channel = self.rng.choice(SERVERS[server])
        return TurnContext(
            user_id=user,
            channel_id=channel,
            server_id=server,
            persona_id=persona,
            channel_is_private=channel in PRIVATE,
        )

    @staticmethod
    def keys(ctx: TurnContext) -> tuple[str, ...]:
        suffix = "" if ctx.persona_id is None else f":{ctx.persona_id}"
        keys = [f"shortterm:user:{ctx.user_id}:{ctx.channel_id}{suffix}"]
        if ctx.server_id is not None:
            keys.append(f"shortterm:server:{ctx.server_id}:{ctx.channel_id}{suffix}")
        return tuple(keys)

    def active(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            self.model.activity[key] = self.clock.now

    # -- operations (each runs as its own task) --------------------------------
    async def jitter(self) -> None:
        for _ in range(self.rng.randrange(4)):
            await asyncio.sleep(0)

    async def capture(self) -> None:
        ctx, wait = self.context(), self.rng.randrange(4)
        keys = self.keys(ctx)
        low: int | None = None
        seen: list[tuple[Token, str]] = []
        if self.rng.random() < 0.3:
            # The turn's prompt is built first; a delete may land before its capture.
            low = self.model.tick()
            text = str(await self.m.build_context(ctx))
            self.check(text, ctx, "build_context before a capture")
            seen = self.model.seen(text, ctx)
        for _ in range(wait):
            await asyncio.sleep(0)
        if low is None:
            low = self.model.tick()  # without a prompt, the turn begins at its capture
        authors = [ctx.user_id]
        if self.rng.random() < 0.3:
            authors.append(self.rng.choice(USERS))  # a host batching a busy channel
        messages = []
        tokens = []
        for author in authors:
            token = self.model.token("crude", keys, ctx)
            token.author, token.begin = author, low
            tokens.append(token)
            messages.append(
                DialogueMessage(role="user", content=f"said qz{token.n}x", author_id=author)
            )
        if seen or self.rng.random() < 0.3:
            reply = self.model.token("crude", keys, ctx)
            reply.begin = low
            tokens.append(reply)
            copies = " ".join(f"qz{t.n}c{reply.n}x" for t, _ in seen)
            messages.append(
                DialogueMessage(role="assistant", content=f"reply qz{reply.n}x {copies}")
            )
            if self.model.overtaken(seen, low, self.model.tick()):
                reply.status = "refused"  # it repeats words deleted during the turn
        self.active(keys)
        called = self.model.tick()
        await self.m.capture(GenerationFinished(context=ctx, messages=messages))
        end = self.model.tick()
        # A capture overtaken by a delete during its turn may have been left out: its
        # words are then not certainly in the window.
        landed = "ok" if not self.model.deleted_between(low, called) else "maybe"
        for token in tokens:
            token.end = end
            if token.status == "pending":
                token.status = landed

    async def upgrade(self) -> None:
        ctx, turn_first = self.context(), self.rng.random() < 0.5
        await self.jitter()
        keys = self.keys(ctx)
        token = self.model.token("summary", keys, ctx)
        self.active(keys)
        seen: list[tuple[Token, str]] = []
        if turn_first:
            context = str(await self.m.build_context(ctx))
            self.check(context, ctx, "build_context before an upgrade")
            seen = self.model.seen(context, ctx)
            self.model.credit(token, seen)
            await self.jitter()
        # The model copies what its prompt showed into the summary.
        copies = " ".join(f"qz{t.n}c{token.n}x" for t, _ in seen)
        overtaken = self.model.overtaken(seen, token.begin, self.model.tick())
        result = await self.m.run_tool(ctx, {"summary": f"summary qz{token.n}x {copies}"})
        token.end = self.model.tick()
        token.status = "ok" if result.success else "refused"
        if result.success and overtaken:
            self.failures.append(
                f"upgrade qz{token.n}x succeeded though a token its prompt showed was deleted "
                "during the turn"
            )
        if result.success:
            self.model.settle_upgrade(token)

    async def clear(self) -> None:
        channel = self.rng.choice([c for cs in SERVERS.values() for c in cs] + [91, 92])
        await self.jitter()
        self.model.record(Deletion(self.model.tick(), "channel", channel=channel))
        await self.m.clear_short_term_memory_for_channel(channel)

    async def purge(self) -> None:
        user = self.rng.choice(USERS)
        server = self.rng.choice([None, None, *SERVERS])
        await self.jitter()
        self.model.record(Deletion(self.model.tick(), "purge", user=user, server=server))
        await self.m.clear_short_term_memory_for_user(user, server)

    async def read(self) -> None:
        ctx = self.context()
        await self.jitter()
        if self.rng.random() < 0.5:
            self.check(str(await self.m.build_context(ctx)), ctx, "build_context")
        else:
            key = self.rng.choice(self.keys(ctx))
            entry = await self.m.get_entry(key)
            if entry is not None:
                text = " ".join([m.content for m in entry.messages] + [entry.summary or ""])
                text += " ".join(entry.categories.values())
                self.failures += self.model.violations(text, [key], self.model.tick(), key)

    async def poison(self) -> None:
        """A value the boundary must refuse with ValueError (or clean, for a name); nothing
        of it may reach the writer and block what is queued behind it."""
        await self.jitter()
        bad = self.rng.choice([-1, 2**63, 2**64, True])
        choice = self.rng.randrange(5)
        self.poisons += 1
        try:
            if choice == 0:
                await self.m.clear_short_term_memory_for_user(bad)
            elif choice == 1:
                await self.m.clear_short_term_memory_for_user(1, bad)
            elif choice == 2:
                await self.m.clear_short_term_memory_for_channel(bad)
            elif choice == 3:
                ctx = TurnContext(user_id=1, channel_id=10, server_id=100)
                message = DialogueMessage(role="user", content="poison", author_id=bad)
                await self.m.capture(GenerationFinished(context=ctx, messages=[message]))
            else:
                # A lone surrogate in a name is cleaned, not refused.
                ctx = TurnContext(user_id=1, channel_id=10, server_id=100, channel_name="a\ud800b")
                self.active(self.keys(ctx))  # it keeps the keys alive like any capture
                await self.m.capture(
                    GenerationFinished(
                        context=ctx,
                        messages=[DialogueMessage(role="user", content="named", author_id=1)],
                    )
                )
                return
        except ValueError:
            return
        self.failures.append(f"poison value {bad!r} accepted (case {choice})")

    def check(self, text: str, ctx: TurnContext, where: str) -> None:
        # A server channel renders server-scope memory; a DM renders the user's own.
        scope = "user" if ctx.server_id is None else "server"
        keys = [k for t in self.model.tokens.values() for k in t.keys if k.split(":")[1] == scope]
        self.failures += self.model.violations(text, keys, self.model.tick(), where)

    # -- steps ----------------------------------------------------------------
    async def batch(self) -> None:
        ops = [self.capture, self.capture, self.upgrade, self.upgrade, self.read, self.read]
        ops += [self.clear, self.purge, self.poison]
        chosen = [self.rng.choice(ops) for _ in range(self.rng.randint(1, 4))]
        await asyncio.gather(*(op() for op in chosen))
        self.batches += 1
        self.operations += len(chosen)
        self.scan_cache()

    def scan_cache(self) -> None:
        at = self.model.tick()
        for entry in self.m.cache:
            if self.m.cache.is_expired(entry):
                continue
            text = " ".join(m.content for m in entry.messages)
            text += " " + (entry.summary or "") + " " + " ".join(entry.categories.values())
            self.failures += self.model.violations(text, [entry.key], at, f"cache {entry.key}")

    async def time_passes(self) -> None:
        self.clock.advance(hours=self.rng.choice((0.1, 0.5, 1.1, 2.1)))
        at = self.model.tick()
        for key, last in self.model.activity.items():
            if self.clock.now >= last + LONGEST_TTL:
                self.model.record(Deletion(at, "expire", key=key))
        await self.m.run_janitor()
        self.scan_cache()

    async def flush_and_check_rows(self) -> None:
        at = self.model.tick()
        await self.m.flush()
        for row in await stored_rows(self.database):
            text = f"{row.summary or ''} {' '.join(row.categories.values())}"
            self.failures += self.model.violations(text, [row.key], at, f"row {row.key}")

    async def restart(self) -> None:
        if self.rng.random() < 0.5:
            await self.m.close()
        else:
            await self.restart_with_pending_deletes()
        self.model.record(Deletion(self.model.tick(), "restart"))
        await self.open()
        self.restarts += 1
        await self.flush_and_check_rows()

    async def restart_with_pending_deletes(self) -> None:
        """Another connection holds the write lock while a purge (and maybe a clear) is made
        and the memory closes: they stay pending, and the next open must apply them before
        anything is served."""
        await self.m.flush()
        async with write_lock_held(self.database):
            await self.purge()
            if self.rng.random() < 0.5:
                await self.clear()
            try:
                await self.m.close()
            except DurabilityError:
                self.pending_restarts += 1

    async def go(self, batches: int) -> None:
        await self.open()
        try:
            for _ in range(batches):
                roll = self.rng.random()
                if roll < 0.04:
                    await self.time_passes()
                elif roll < 0.08:
                    await self.flush_and_check_rows()
                elif roll < 0.10:
                    await self.restart()
                else:
                    await self.batch()
                if self.failures:
                    break
            await self.flush_and_check_rows()
        finally:
            await self.m.close()


@pytest.mark.slow
@pytest.mark.parametrize("erasure", POLICIES)
async def test_nothing_deleted_comes_back(
    store_kind: str,
    erasure: str,
    fresh_database: Callable[[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Seeded races of writes, deletes, evictions, expiry and restarts never bring back
    what was deleted."""
    base = seed_for("resurrection")
    runs, per_run = scaled(6, 40), scaled(500, 1500)
    totals = {"batches": 0, "operations": 0, "restarts": 0, "tokens": 0, "deletions": 0}
    totals |= {"pending": 0, "poisons": 0}
    # Each erasure policy on every other seed, each its own test (so that the two run side
    # by side): each policy has its own rule of what must go.
    seeds = [i for i in range(runs) if POLICIES[(base + i) % 2] == erasure]
    for i in seeds:
        run = Run(fresh_database(f"run{i}"), base + i, erasure, tmp_path / f"run{i}-pending")
        await run.go(per_run)
        assert not run.failures, (
            f"seed {run.seed}, {erasure} (replay with STM_SEED={run.seed}): {run.failures[:5]}"
        )
        totals["batches"] += run.batches
        totals["operations"] += run.operations
        totals["restarts"] += run.restarts
        totals["pending"] += run.pending_restarts
        totals["poisons"] += run.poisons
        totals["tokens"] += len(run.model.tokens)
        totals["deletions"] += sum(e.kind in ("channel", "purge") for e in run.model.events)
    with capsys.disabled():
        print(
            f"\nno resurrection: {totals['batches']} concurrent interleavings "
            f"({totals['operations']} operations, {totals['deletions']} clears and purges, "
            f"{totals['restarts']} restarts ({totals['pending']} with deletes left pending), "
            f"{totals['poisons']} poison values, {totals['tokens']} tokens) over {len(seeds)} "
            f"seeds from {base}, {erasure}, on {store_kind}"
        )


async def test_upgrade_never_raises_when_reading_one_key_evicts_the_other(
    store_database: str,
) -> None:
    """With a full cache, reading the server row can evict the user entry just read; the
    upgrade then either lands in entries the cache holds or is refused, never raises."""
    config = STMConfig(database=store_database, write_behind_seconds=0.01)
    ctx = TurnContext(user_id=1, channel_id=10, server_id=100)
    async with ShortTermMemory.open(config.model_copy(update={"cache_max_keys": 1})) as memory:
        result = await memory.run_tool(ctx, {"summary": "one key at a time"})
        assert not result.success and "Nothing was saved" in result.message
    async with ShortTermMemory.open(config.model_copy(update={"cache_max_keys": 3})) as memory:
        for channel in (11, 12, 13):
            await memory.capture(
                GenerationFinished(
                    context=ctx.model_copy(update={"channel_id": channel}),
                    messages=[DialogueMessage(role="user", content="fill", author_id=1)],
                )
            )
        result = await memory.run_tool(ctx.model_copy(), {"summary": "held"})
        assert result.success, result.message
        entry = await memory.get_entry("shortterm:server:100:10")
        assert entry is not None and entry.summary == "held"


async def test_a_read_in_flight_across_a_janitor_pass_does_not_revive_expired_memory(
    store_database: str,
) -> None:
    """A row read before the clock moved past its TTL is not merged into the fresh entry
    that a capture made after the janitor dropped the expired one."""
    clock = Clock(1_700_000_000.0)
    config = STMConfig(database=store_database, write_behind_seconds=0.01)
    ctx = TurnContext(user_id=1, channel_id=10, server_id=100)

    def said(text: str) -> GenerationFinished:
        return GenerationFinished(
            context=ctx, messages=[DialogueMessage(role="user", content=text, author_id=1)]
        )

    async with ShortTermMemory.open(config, clock=clock) as memory:
        await memory.capture(said("first"))
        assert (await memory.run_tool(ctx.model_copy(), {"summary": "EXPIRED-SUMMARY"})).success
    store = FaultyStore(await open_store(config))
    async with ShortTermMemory.open(config, store=store, clock=clock) as memory:
        store.hold()
        await memory.capture(said("cold capture"))
        await store.holding()  # the background hydration is reading the row
        clock.advance(hours=config.summary_ttl_hours + 1)
        await memory.run_janitor()
        await memory.capture(said("after expiry"))
        store.release()
        await memory.flush()
        entry = await memory.get_entry("shortterm:server:100:10")
        assert entry is not None and entry.summary is None
        assert "EXPIRED-SUMMARY" not in str(await memory.build_context(ctx.model_copy()))


async def test_a_clear_during_the_recall_read_is_not_rendered(store_database: str) -> None:
    """build_context holds this channel's entry while it reads the other channels' rows; a
    clear landing during that read must not be rendered when the read returns."""
    config = STMConfig(database=store_database, write_behind_seconds=0.01)
    ctx = TurnContext(user_id=1, channel_id=10, server_id=100)
    turn_event = GenerationFinished(
        context=ctx, messages=[DialogueMessage(role="user", content="x", author_id=1)]
    )
    async with ShortTermMemory.open(config) as memory:
        await memory.capture(turn_event)
        assert (await memory.run_tool(ctx.model_copy(), {"summary": "CLEARED-MID-READ"})).success
    store = FaultyStore(await open_store(config))
    async with ShortTermMemory.open(config, store=store) as memory:
        await memory.capture(turn_event)  # the entry is hot again, its recall group is not
        await memory.flush()
        store.hold()
        building = asyncio.create_task(memory.build_context(ctx.model_copy()))
        await store.holding()  # it now waits for the recall group's rows
        await memory.clear_short_term_memory_for_channel(10)
        store.release()
        assert "CLEARED-MID-READ" not in str(await building)


async def test_a_row_exactly_at_its_ttl_goes_in_the_same_janitor_pass(
    store_database: str,
) -> None:
    """The cache counts an entry expired at its TTL; the janitor must delete its row then too."""
    clock = Clock(1_700_000_000.0)
    config = STMConfig(database=store_database)
    ctx = TurnContext(user_id=1, channel_id=10, server_id=100)
    async with ShortTermMemory.open(config, clock=clock) as memory:
        await memory.capture(
            GenerationFinished(
                context=ctx, messages=[DialogueMessage(role="user", content="x", author_id=1)]
            )
        )
        assert (await memory.run_tool(ctx.model_copy(), {"summary": "AT-TTL"})).success
        clock.advance(hours=config.summary_ttl_hours)
        await memory.run_janitor()
        await memory.flush()
        assert await memory.get_entry("shortterm:server:100:10") is None
        rows = await memory.store.execute(  # type: ignore[attr-defined]
            "SELECT count(*) FROM short_term_memories"
        )
        assert rows == [(0,)]
