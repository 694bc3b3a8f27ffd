"""What a Discord delete costs when N cached entries hold packed windows whose replies carry
sources, none naming the deleted message: the walk of the sourced entries (median of 20).
Run with ``python -m benchmarks.sourced_walk``."""

import statistics
import time

from stm._cache import Entry, MemoryCache
from stm._messages import forget_messages
from stm._window import Sources, StoredMessage, Window


def build(n: int) -> MemoryCache:
    cache = MemoryCache(max_keys=n * 2, crude_ttl_hours=12, summary_ttl_hours=24, clock=time.time)
    for i in range(n):
        key = f"shortterm:server:1:{1000 + i}"
        e = Entry(
            key=key,
            scope="server",
            server_id=1,
            channel_id=1000 + i,
            user_id=None,
            persona_id=None,
            messages=Window(),
            updated_at=time.time(),
        )
        src = Sources((i + 7,), (10**12 + i,), ())
        msgs = []
        for t in range(5):
            msgs.append(StoredMessage("user", "x" * 120, "u", i, 1.0, i, 10**9 + i * 10 + t))
            msgs.append(StoredMessage("assistant", "y" * 240, "Bot", None, 1.0, i, None, src))
        e.messages = Window(tuple(msgs)).packed()
        cache.put(e)
        cache.index_sourced(e)
    return cache


class Reads:
    """The deletion log, as far as ``forget_messages`` needs it: nothing recorded."""

    class deletions:
        @staticmethod
        def record(*args: object, **kwargs: object) -> None:
            pass


def main() -> None:
    for n in (1000, 5000):
        cache = build(n)
        t = []
        for k in range(20):
            s = time.perf_counter()
            forget_messages(cache, Reads, 999_999, [42 + k])
            t.append(time.perf_counter() - s)
        print(f"{n} entries: a delete quoted nowhere p50 {statistics.median(t) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
