"""gRPC plumbing shared by clients, brokers and the portal: channels, calls, the master list.

Every call goes through :func:`invoke`, which turns ``grpc.RpcError`` into our exception tree
(lib.wire_errors), so callers only ever see TubeqError subclasses. :class:`MasterClient` holds
the whole master list: it follows a standby's NOT_LEADER hint to the active master and rotates
through the list when a master does not answer.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc

from lib import errors
from lib.auth.client import AUTH_HEADER, ClientAuth, Credentials, TokenSource, auth_for
from lib.tls import Tls
from lib.tls import resolve as resolve_tls
from lib.wire_errors import from_rpc_error

MAX_MESSAGE_BYTES = 64 << 20  # gRPC default is 4 MiB: batches and fetches are bigger
# Keepalive: a peer that stops answering (SIGSTOP, a cut link that sends no RST) fails the
# calls in flight to it with UNAVAILABLE within KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS,
# and so does a new connection to it (its handshake is bounded the same way), instead of
# each call waiting out its whole deadline (30 s for a producer). The ping timeout must be
# set beside keepalive_timeout_ms: gRPC 1.6x lets a keepalive ping ride on a ping already
# in flight (the BDP probe sent with the last data), whose timeout is
# grpc.http2.ping_timeout_ms (60 s by default), so without it a call in flight to a paused
# broker waited 30 s despite a 1 s keepalive (measured with a SIGSTOPped server).
# max_pings_without_data 0: keep pinging a long-poll whose server sends nothing for a while.
KEEPALIVE_TIME_MS = 1_000
KEEPALIVE_TIMEOUT_MS = 2_000
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.enable_retries", 0),  # retries are ours: they know which errors are safe
)
# Servers (brokers and masters) must allow those pings, or they answer GOAWAY too_many_pings
# after two pings closer than min_ping_interval_without_data_ms (5 min by default): half
# the clients' interval, so a ping delayed by a busy client and the next one on time do
# not count as a strike.
SERVER_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
    ("grpc.so_reuseport", 0),  # two servers must never share a port by accident
)

R = TypeVar("R")


def channel(address: str, tls: Tls | None = None) -> grpc.Channel:
    """A channel with our message limits: TLS when ``tls`` is given, else plaintext."""
    if tls is None:
        return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    return grpc.secure_channel(address, tls.channel_credentials(), options=CHANNEL_OPTIONS)


def invoke(method: Callable[..., R], request: Any, timeout: float,
           metadata: Sequence[tuple[str, str]] | None = None) -> R:
    """Call a unary stub method; failures come back as TubeqError subclasses."""
    try:
        return method(request, timeout=timeout, metadata=metadata)
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None


class ChannelPool:
    """One channel per address, shared by every stub of a process (channels are thread-safe)."""

    def __init__(self, auth: TokenSource | None = None, tls: Tls | None = None) -> None:
        """With ``auth`` every channel carries its token (lib/auth/client.py); with ``tls``
        every channel is TLS (lib/tls.py)."""
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._raw: list[grpc.Channel] = []
        self._bare: dict[str, grpc.Channel] = {}  # the same channels, not intercepted
        self._auth = auth
        self.tls = tls

    def get(self, address: str) -> grpc.Channel:
        with self._lock:
            return self._get(address)[0]

    def get_bare(self, address: str) -> grpc.Channel:
        """The channel without the auth interceptor: the caller adds :meth:`auth_metadata` to
        each call itself. For the producer's Produce calls, where the interceptor's Python
        (new call details per call) is ~25 µs of a ~700 µs send_sync."""
        with self._lock:
            return self._get(address)[1]

    def auth_metadata(self) -> tuple[tuple[str, str], ...]:
        """The metadata the interceptor adds to a call (none without auth)."""
        return () if self._auth is None else ((AUTH_HEADER, self._auth.header()),)

    def _get(self, address: str) -> tuple[grpc.Channel, grpc.Channel]:
        ch = self._channels.get(address)
        if ch is None:
            bare = channel(address, self.tls)
            self._raw.append(bare)
            ch = bare if self._auth is None else \
                grpc.intercept_channel(bare, ClientAuth(self._auth))
            self._channels[address] = ch
            self._bare[address] = bare
        return ch, self._bare[address]

    def discard(self, address: str) -> None:
        """Close the channel to ``address`` (its calls in flight fail at once with CANCELLED:
        the way to end a blocking call stuck on a broker that stopped answering) and forget
        it: the next :meth:`get` opens a new one. A stub made from the old channel raises
        ValueError ("closed channel") when called."""
        with self._lock:
            self._channels.pop(address, None)
            bare = self._bare.pop(address, None)
            if bare is not None:
                self._raw.remove(bare)
        if bare is not None:
            bare.close()

    def close(self) -> None:
        with self._lock:
            chans, self._raw, self._channels, self._bare = self._raw, [], {}, {}
        for ch in chans:
            ch.close()


def client_pool(masters: str | Sequence[str], credentials: Credentials | None,
                timeout: float, tls: Tls | None) -> ChannelPool:
    """The channels of a client: its credentials (else the environment's) log in, and TLS
    when it was given ``tls`` or the environment sets TUBEQ_TLS_CA (lib/tls.py)."""
    tls = resolve_tls(tls)
    return ChannelPool(auth_for(masters, credentials, timeout, tls), tls)


def parse_masters(masters: str | Sequence[str]) -> list[str]:
    """``"h1:p1,h2:p2"`` or a list -> list of addresses; refuses an empty or malformed list."""
    items = masters.split(",") if isinstance(masters, str) else list(masters)
    out = [m.strip() for m in items if m and m.strip()]
    if not out:
        raise errors.InvalidArgument("the master list is empty: give at least one host:port")
    for addr in out:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise errors.InvalidArgument(f"bad master address {addr!r}: expected host:port")
    return out


class MasterClient:
    """Calls the active master, wherever it is in the list.

    ``call(stub_factory, "Method", request)`` retries retriable errors (NOT_LEADER, unreachable
    master) until ``timeout`` passes, moving to the hinted leader or to the next address; any
    other error is raised at once. Thread-safe.
    """

    def __init__(self, masters: str | Sequence[str], pool: ChannelPool | None = None,
                 timeout: float = 10.0, attempt_timeout: float = 3.0,
                 tls: Tls | None = None) -> None:
        """Calls go through ``pool``, else a pool of its own (TLS with ``tls``)."""
        self.masters = parse_masters(masters)
        self.timeout = timeout
        self.attempt_timeout = attempt_timeout
        self._pool = pool or ChannelPool(tls=tls)
        self._own_pool = pool is None
        self._lock = threading.Lock()
        self._current = self.masters[0]

    @property
    def pool(self) -> ChannelPool:
        return self._pool

    @property
    def current(self) -> str:
        """The master last known to be active (or the next one to try)."""
        return self._current

    def call(self, stub_factory: Callable[[grpc.Channel], Any], method: str, request: Any,
             timeout: float | None = None,
             metadata: Sequence[tuple[str, str]] | None = None) -> Any:
        budget = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        delay, last = 0.05, None
        while True:
            address = self._current
            stub = stub_factory(self._pool.get(address))
            left = deadline - time.monotonic()
            try:
                return invoke(getattr(stub, method), request,
                              max(0.05, min(self.attempt_timeout, left)), metadata)
            except errors.NotLeader as exc:
                last = exc
                self._follow(address, exc.details.get("leader") or "")
            except (errors.Unavailable, errors.RequestTimedOut) as exc:
                last = exc
                self._rotate(address)
            if time.monotonic() + delay >= deadline:
                raise errors.Unavailable(
                    f"no active master answered within {budget} s "
                    f"(masters: {', '.join(self.masters)}); last error: {last}",
                    masters=",".join(self.masters)) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _follow(self, failed: str, leader: str) -> None:
        with self._lock:
            if self._current != failed:
                return  # another thread already moved on
            if leader and leader != failed:
                if leader not in self.masters:
                    self.masters.append(leader)
                self._current = leader
            else:
                self._rotate_locked(failed)

    def _rotate(self, failed: str) -> None:
        with self._lock:
            if self._current == failed:
                self._rotate_locked(failed)

    def _rotate_locked(self, failed: str) -> None:
        i = self.masters.index(failed) if failed in self.masters else -1
        self._current = self.masters[(i + 1) % len(self.masters)]

    def close(self) -> None:
        if self._own_pool:
            self._pool.close()
