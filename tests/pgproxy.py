"""A TCP proxy in front of the test PostgreSQL server, which the test stops, restarts and
freezes: what a client sees of a server that goes down and comes back, or of a network
that stops carrying anything, without touching the server other tests share."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse

__all__ = ["Proxy"]


class Proxy:
    """Forwards 127.0.0.1:<port> to the server of ``url`` while running and not frozen."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._url = url
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    def url(self, url: str | None = None) -> str:
        """``url`` (by default the proxied one) pointed at the proxy."""
        parts = urllib.parse.urlsplit(url or self._url)
        user_info, _, _ = parts.netloc.rpartition("@")
        netloc = f"{user_info}@127.0.0.1:{self.port}" if user_info else f"127.0.0.1:{self.port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    async def start(self) -> None:
        """Accept connections (on the same port as before, after a stop)."""
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """The server goes away: new connections are refused, open ones are cut."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    def freeze(self) -> None:
        """Nothing passes any more, either way, and nothing is closed (a dead network)."""
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Held from the start: a stop while it waits (frozen, or connecting upstream) cuts
        # it too, and whatever ends it (a stop, the end of the test's loop) closes both ends.
        self._links.add(writer)
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self._flowing.wait()
            try:
                up_reader, up_writer = await asyncio.open_connection(*self._target)
            except OSError:
                return
            if writer not in self._links:  # stopped meanwhile
                return
            self._links.add(up_writer)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                if end is not None:
                    self._links.discard(end)
                    end.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
