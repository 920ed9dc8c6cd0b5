"""What the broker's plain-socket ports share (the Kafka port, the replica stream): an
asyncio server on the broker's loop whose connections end with it, bound or refused with a
ConfigError naming the port."""
from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable

from lib.errors import ConfigError
from lib.logs import event

log = logging.getLogger(__name__)

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Listening:
    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def listen(self, serve: Serve, host: str, port: int, tls: ssl.SSLContext | None,
                     handshake_timeout_s: float, what: str) -> int:
        """Bind (on the running loop) and return the port; TLS with ``tls``."""
        try:
            self.server = await asyncio.start_server(
                serve, host, port, limit=1 << 16, ssl=tls,
                ssl_handshake_timeout=handshake_timeout_s if tls else None)
        except OSError as exc:
            raise ConfigError(f"cannot bind the {what} port {host}:{port}: {exc}") from None
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self._connections):
                task.cancel()
            await self.server.wait_closed()

    def admit(self, limit: int) -> bool:
        """Count the running connection in, unless ``limit`` are open (then it is closed by
        the caller); :meth:`leave` when it ends."""
        if len(self._connections) >= limit:
            return False
        self._connections.add(asyncio.current_task())
        return True

    def leave(self) -> None:
        self._connections.discard(asyncio.current_task())

    async def converse(self, talk: Awaitable[None], writer: asyncio.StreamWriter, peer: str,
                       refused: type[Exception], refused_event: str, failed_event: str
                       ) -> None:
        """Run one connection's ``talk``, then close it: a peer gone or too slow ends it
        quietly, bytes ``refused`` are logged as ``refused_event`` (WARNING), anything else
        as ``failed_event`` (ERROR): one connection's bug, never the broker's."""
        try:
            await talk
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        except refused as bad:
            event(log, refused_event, logging.WARNING, peer=peer, reason=str(bad))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.error(failed_event, exc_info=exc)
        finally:
            self.leave()
            writer.close()
