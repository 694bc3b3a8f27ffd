"""W5 memory: what 100,000 active keys with full windows cost in RSS, and that the cap bounds it.

Every key is a DM channel (one key per turn, so no message is shared between
keys) filled with a full window of 120- and 240-character messages. "Beyond
the message text" subtracts the UTF-8 bytes of the message contents held.
The capped run creates the same keys with ``cache_max_keys`` at a fifth of
them: entries are evicted (segmented LRU, see stm/_cache.py) and memory stays bounded. The
floor is a dict of bounded deques holding the same fields per key and per
message as the library's cache entries. ``stm-ids`` is the first run with every
message carrying its Discord message id, as a host that passes them does.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections import deque
from typing import Any

from .common import rss_bytes, scratch_dir, settle, text

WINDOW = 10
TURNS = WINDOW // 2


def _contents(key: int) -> list[tuple[str, str]]:
    return [(text(f"u{key}.{t}", 120), text(f"r{key}.{t}", 240)) for t in range(TURNS)]


async def run_stm(keys: int, cap: int | None, trace: bool, ids: bool = False) -> dict[str, Any]:
    from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext

    with scratch_dir() as folder:
        settings: dict[str, Any] = {"database": str(folder / "stm.sqlite3")}
        if cap is not None:
            settings["cache_max_keys"] = cap
        memory = await ShortTermMemory.open(STMConfig(**settings))
        try:
            # Warm every code path once, so imports and caches are in the baseline.
            warm = TurnContext(user_id=1, channel_id=1)
            await memory.capture(
                GenerationFinished(
                    context=warm, messages=[DialogueMessage(role="user", content="warm")]
                )
            )
            await memory.build_context(warm)
            await memory.clear_short_term_memory_for_channel(1)
            await memory.flush()
            settle()
            if trace:
                tracemalloc.start()
            base = rss_bytes()
            batch = 1000
            for first in range(0, keys, batch):
                for k in range(first, min(keys, first + batch)):
                    user = 1_000_000 + k
                    ctx = TurnContext(user_id=user, channel_id=2_000_000 + k, user_name=f"u{k}")
                    for t, (user_text, reply) in enumerate(_contents(k)):
                        # Snowflake-sized ids, as Discord's are.
                        said = 10**18 + (k * TURNS + t) * 2 if ids else None
                        answer = said + 1 if said is not None else None
                        await memory.capture(
                            GenerationFinished(
                                context=ctx,
                                messages=[
                                    DialogueMessage(
                                        role="user", content=user_text, author_id=user,
                                        speaker_name=ctx.user_name, message_id=said,
                                    ),
                                    DialogueMessage(
                                        role="assistant", content=reply, author_id=1,
                                        message_id=answer,
                                    ),
                                ],
                            )
                        )  # fmt: skip
                await memory.flush()
            settle()
            grown = rss_bytes() - base
            traced = tracemalloc.get_traced_memory()[0] if trace else 0
            if trace:
                tracemalloc.stop()
            held = memory.stats["cached_keys"]
            text_bytes = sum(
                len(m.content.encode()) for entry in memory.cache for m in entry.messages
            )
            full = sum(len(entry.messages) == WINDOW for entry in memory.cache)
        finally:
            await memory.close()
    grown_or_traced = traced if trace else grown
    return {
        "keys_created": keys,
        "keys_held": held,
        "full_windows": full,
        "bytes_grown": grown_or_traced,
        "text_bytes": text_bytes,
        "mb_per_100k_keys": grown_or_traced / max(held, 1) * 100_000 / 2**20,
        "bytes_per_key_beyond_text": (grown_or_traced - text_bytes) / max(held, 1),
        "measure": "tracemalloc" if trace else "rss",
    }


async def run_deque(keys: int) -> dict[str, Any]:
    # The floor holds what an entry holds for this workload, in plain containers: per key
    # its scope, ids, last update and turn counter, and a bounded deque of messages with
    # every field of the library's StoredMessage (role, content, speaker name, author id,
    # timestamp, the user whose turn it was).
    settle()
    base = rss_bytes()
    now = time.time
    store: dict[str, list[Any]] = {}
    for k in range(keys):
        user, channel, name = 1_000_000 + k, 2_000_000 + k, f"u{k}"
        window: deque[tuple[str, str, str, int | None, float, int]] = deque(maxlen=WINDOW)
        record = store[f"shortterm:user:{user}:{channel}"] = [
            "user", None, user, channel, 0.0, 0, window,
        ]  # fmt: skip
        for user_text, reply in _contents(k):
            window.append(("user", user_text, name, user, now(), user))
            window.append(("assistant", reply, "", 1, now(), user))
            record[4] = now()
            record[5] += 1
    settle()
    grown = rss_bytes() - base
    windows = [r[6] for r in store.values()]
    text_bytes = sum(len(m[1].encode()) for w in windows for m in w)
    return {
        "keys_created": keys,
        "keys_held": len(store),
        "full_windows": sum(len(w) == WINDOW for w in windows),
        "bytes_grown": grown,
        "text_bytes": text_bytes,
        "mb_per_100k_keys": grown / keys * 100_000 / 2**20,
        "bytes_per_key_beyond_text": (grown - text_bytes) / keys,
        "measure": "rss",
    }


SYSTEMS = {"stm": None, "stm-ids": None, "stm-tracemalloc": None, "stm-cap": None, "deque": None}


def run(system: str, quick: bool) -> dict[str, Any]:
    keys = 10_000 if quick else 100_000
    if system == "deque":
        return asyncio.run(run_deque(keys))
    cap = keys // 5 if system == "stm-cap" else None
    trace = system == "stm-tracemalloc"
    result = asyncio.run(run_stm(keys, cap, trace=trace, ids=system == "stm-ids"))
    result["cache_max_keys"] = cap
    return result
