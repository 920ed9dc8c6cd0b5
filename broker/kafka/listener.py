"""The broker's Kafka port: asyncio streams on the broker's event loop.

Each connection is served as Kafka's brokers serve one: a request is read whole, answered,
then the next is read (clients pipeline; answers keep their order). What a hostile or broken
client can cost is bounded: a size prefix over ``max_request_bytes`` (a 2 GiB prefix
included) closes the connection before anything is allocated; the bytes of requests being
read or served at once are capped across all connections (``max_inflight_bytes``: a reader
waits for room, it does not allocate); a request must arrive whole within
``request_timeout_s`` of its first byte (slow-loris) and a connection may stay idle
``idle_timeout_s``; past ``max_connections`` a new connection is closed at once. Bytes that
do not parse close the connection (Kafka's own answer), logged with the reason.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass

from broker.kafka import wire
from broker.kafka.gateway import Gateway
from broker.kafka.session import Session
from broker.listening import Listening
from lib.logs import event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListenerLimits:
    max_connections: int = 1000
    max_request_bytes: int = 100 << 20  # Kafka's socket.request.max.bytes
    max_inflight_bytes: int = 256 << 20  # all connections' requests being read or served
    request_timeout_s: float = 30.0
    idle_timeout_s: float = 600.0  # Kafka's connections.max.idle.ms


class _ByteBudget:
    """Bytes of requests in memory at once; a request larger than the whole budget may run
    alone (it is within max_request_bytes)."""

    def __init__(self, total: int) -> None:
        self.total, self.used = total, 0
        self._cond = asyncio.Condition()

    async def take(self, n: int) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.used == 0 or self.used + n <= self.total)
            self.used += n

    async def give(self, n: int) -> None:
        async with self._cond:
            self.used -= n
            self._cond.notify_all()


class KafkaListener(Listening):
    def __init__(self, gateway: Gateway, limits: ListenerLimits, auth_on: bool) -> None:
        super().__init__()
        self.gateway, self.limits, self.auth_on = gateway, limits, auth_on
        self._budget: _ByteBudget | None = None

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """Bind (on the running loop) and return the port; TLS with ``tls``."""
        self._budget = _ByteBudget(self.limits.max_inflight_bytes)
        return await self.listen(self._serve, host, port, tls, self.limits.request_timeout_s,
                                 "Kafka")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("", 0)
        if not self.admit(self.limits.max_connections, writer):
            event(log, "kafka.connection_refused", logging.WARNING, peer=str(peer[0]),
                  limit=self.limits.max_connections)
            writer.close()
            return
        session = Session.opened(str(peer[0]), self.auth_on, reader.at_eof)
        await self.converse(self._requests(reader, writer, session), writer, str(peer[0]),
                            wire.Malformed, "kafka.request_refused", "kafka.connection_failed")

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        session: Session) -> None:
        limits, budget = self.limits, self._budget
        while not session.closing:
            head = await asyncio.wait_for(reader.readexactly(4), limits.idle_timeout_s)
            size = wire.SIZE.unpack(head)[0]
            if not 0 < size <= limits.max_request_bytes:
                raise wire.Malformed(f"request size {size} outside 1.."
                                     f"{limits.max_request_bytes} bytes")
            await budget.take(size)
            try:
                payload = await asyncio.wait_for(reader.readexactly(size),
                                                 limits.request_timeout_s)
                answer = await self.gateway.answer(session, payload)
                del payload
                if answer is not None:
                    writer.write(answer)
                    await asyncio.wait_for(writer.drain(), limits.request_timeout_s)
            finally:
                await budget.give(size)
