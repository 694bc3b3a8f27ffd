"""A process that works the memory until it is killed; test_crash.py kills it and checks.

    python tests/crash_writer.py DATABASE LOG SEED

Runs captures, upgrades, channel clears and user purges one after another,
forever, and appends one JSON line per event to LOG (with half the seeds, every purge
in the smallest steps: a kill then often lands in the middle of one):

- ``attempt`` before an upgrade, ``ack`` once run_tool answered success (with
  the keys written and their contributors: whose words the prompts of the version
  they pin showed directly, which is what a purge clears them for under the
  ``direct`` policy this writer uses), ``refused`` otherwise;
- ``clear``/``purge`` before a delete, ``cleared``/``purged`` once flush()
  returned after it (the delete is durable);
- ``capture`` for each capture.

Acknowledgements and completed deletes are fsynced before the next operation
starts: they are promises the checker holds the database to. The other lines
are plain appends; a SIGKILL loses nothing the kernel already has.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from typing import Any

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
from stm.store import _chains as chains

USERS = (1, 2, 3, 4)
SERVERS = {100: (10, 11, 12, 13), 200: (20, 21, 22)}


class Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event: dict[str, Any], *, sync: bool = False) -> None:
        os.write(self.fd, (json.dumps(event) + "\n").encode())
        if sync:
            os.fsync(self.fd)


def random_context(rng: random.Random) -> TurnContext:
    user = rng.choice(USERS)
    if rng.random() < 0.2:
        return TurnContext(user_id=user, channel_id=900 + user, server_id=None)
    server = rng.choice(list(SERVERS))
    persona = 7 if rng.random() < 0.15 else None
    return TurnContext(
        user_id=user, channel_id=rng.choice(SERVERS[server]), server_id=server, persona_id=persona
    )


def keys_of(ctx: TurnContext) -> list[str]:
    suffix = "" if ctx.persona_id is None else f":{ctx.persona_id}"
    keys = [f"shortterm:user:{ctx.user_id}:{ctx.channel_id}{suffix}"]
    if ctx.server_id is not None:
        keys.append(f"shortterm:server:{ctx.server_id}:{ctx.channel_id}{suffix}")
    return keys


async def work(database: str, log: Log, seed: int) -> None:
    rng = random.Random(seed)
    # The direct policy, so that what a purge clears is the version's own members, which the
    # writer logs with each acknowledgement (the policies themselves are tested elsewhere).
    config = STMConfig(
        database=database, write_behind_seconds=0.01, delete_retry_seconds=0.05, erasure="direct"
    )
    small = rng.random() < 0.5
    if small:
        # Every purge in steps of one membership, chain, range or row each: many
        # transactions, so that a kill often lands between two of them and the next open
        # must finish what the killed process left.
        for name in ("SEED_CHUNK", "FOLLOW_CHUNK", "SWEEP_CHUNK", "REACH_PAGE", "FINISH_CHUNK"):
            setattr(chains, name, 1)
    memory = await ShortTermMemory.open(config)
    log.write({"e": "start", "seed": seed, "small_steps": small}, sync=True)
    n = 0
    while True:
        n += 1
        roll = rng.random()
        if roll < 0.40:
            ctx = random_context(rng)
            text = f"crude-{seed}-{n}"
            log.write({"e": "capture", "keys": keys_of(ctx)})
            await memory.capture(
                GenerationFinished(
                    context=ctx,
                    messages=[
                        DialogueMessage(role="user", content=text, author_id=ctx.user_id),
                        DialogueMessage(role="assistant", content=f"reply to {text}"),
                    ],
                )
            )
        elif roll < 0.85:
            ctx = random_context(rng)
            text = f"SUMMARY-{seed}-{n}"
            keys = keys_of(ctx)
            log.write({"e": "attempt", "keys": keys, "text": text})
            result = await memory.run_tool(ctx, {"summary": text})
            if result.success:
                rows = {}
                for key in keys:
                    entry = memory.cache.peek(key)
                    assert entry is not None and entry.summary == text
                    assert entry.pin is not None
                    contributors = sorted(await memory.store.members(entry.pin))  # type: ignore[attr-defined]
                    rows[key] = {"contributors": contributors, "server": ctx.server_id}
                log.write({"e": "ack", "text": text, "rows": rows}, sync=True)
            else:
                log.write({"e": "refused", "text": text, "why": result.message}, sync=True)
        elif roll < 0.92:
            channel = rng.choice([c for cs in SERVERS.values() for c in cs])
            log.write({"e": "clear", "channel": channel})
            await memory.clear_short_term_memory_for_channel(channel)
            await memory.flush()
            log.write({"e": "cleared", "channel": channel}, sync=True)
        else:
            user = rng.choice(USERS)
            server = rng.choice([None, *SERVERS])
            # "at": where in the run it began (summaries written later are "SUMMARY-" with a
            # later seed, or the same seed and a later n): a purge clears only what was
            # written before it.
            log.write({"e": "purge", "user": user, "server": server, "at": [seed, n]})
            await memory.clear_short_term_memory_for_user(user, server)
            await memory.flush()
            log.write({"e": "purged", "user": user, "server": server}, sync=True)


def main() -> None:
    database, log_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    asyncio.run(work(database, Log(log_path), seed))


if __name__ == "__main__":
    main()
