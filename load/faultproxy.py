"""A TCP forwarder whose link a test or a benchmark can break on purpose, without root.

Route a server's links through a :class:`FaultProxy` (its clients dial ``proxy.address``, which
forwards to ``target``) and :meth:`FaultProxy.set_mode` picks what the link does, for the
connections open now and for new ones. gRPC (HTTP/2 over plain TCP) and pysyncobj's Raft
links go through unchanged while passing. The modes are the ways a network fails:

- ``pass``: forward both ways.
- ``reset``: a link that breaks loudly (a peer restarted, a firewall's REJECT): every open
  connection ends now with a reset (RST), and new ones are reset as soon as they are accepted.
  A gRPC call on it fails at once with UNAVAILABLE. Clients reconnect once it passes again.
- ``hold``: a link that goes silent for a while (iptables DROP that is lifted again): bytes sent
  into it are held, neither delivered nor refused, and so is a close; a connection opened
  meanwhile is accepted and reaches nobody. Once it passes again the held bytes flow on, in
  order, as TCP's retransmissions would deliver them, and the waiting connections are dialled.
- ``drop``: a black hole (a pulled cable, a VM frozen elsewhere): every byte either side sends
  is read and thrown away, no close is carried, new connections are accepted and never
  answered. Leaving ``drop`` resets every connection that lived through it: their streams lost
  bytes and cannot go on.

Threading: one acceptor thread, per connection a connector thread (it waits out a hold before
it dials) and two pumps, one per direction (blocking I/O: no buffering of our own, so no
deadlock whatever each side sends). Only the pumps close a forwarded connection's sockets (the
last one to end): a socket closed under a pump blocked on it could have its descriptor reused
by another connection meanwhile; anyone else ends a connection by shutting its sockets down,
which wakes both pumps. ``set_mode`` and ``stop`` may be called from any thread; ``stop`` ends
every thread and closes every socket, so use the proxy as a context manager (or stop it in a
fixture). Listens on 127.0.0.1 only, on ``port`` (0: the system picks a free one), which it
keeps in every mode, so the address stays valid across a fault.
"""
from __future__ import annotations

import socket
import struct
import threading
from enum import StrEnum

ACCEPT_POLL_S = 0.1  # how soon the acceptor notices stop()
CONNECT_TIMEOUT_S = 2.0
CHUNK = 64 << 10
STOP_JOIN_S = 5.0


class Mode(StrEnum):
    """What the link does with what it carries (see the module docstring)."""

    PASS = "pass"
    RESET = "reset"
    HOLD = "hold"
    DROP = "drop"


class _Link:
    """One connection through the proxy: the accepted client socket, the socket dialled to the
    target (None until dialled) and how many pumps still run. Guarded by the proxy's lock."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.server: socket.socket | None = None
        self.pumps = 0
        self.ended = False
        self.abort = False  # ended by the proxy (a fault, stop): close with a reset


class FaultProxy:
    """Forwards 127.0.0.1:<port> to ``target`` ("host:port") as its :class:`Mode` says."""

    def __init__(self, target: str, port: int = 0, mode: Mode | str = Mode.PASS) -> None:
        host, _, tport = target.rpartition(":")
        self.target = (host, int(tport))
        self._mode = Mode(mode)
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.settimeout(ACCEPT_POLL_S)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._cond = threading.Condition()  # guards everything below and every _Link
        self._stopped = False
        self._links: set[_Link] = set()
        self._threads: list[threading.Thread] = []
        self._acceptor = self._spawn(self._accept, "accept")

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode | str) -> None:
        """Switch to ``mode``; it applies to the open connections too (see the module)."""
        mode = Mode(mode)
        with self._cond:
            old, self._mode = self._mode, mode
            if mode is Mode.RESET or (old is Mode.DROP and mode is not Mode.DROP):
                for link in list(self._links):
                    self._end(link, abort=True)
            self._cond.notify_all()  # wakes held pumps and waiting connectors

    def stop(self) -> None:
        """Reset every connection, end every thread, close the listener. Safe to call twice."""
        with self._cond:
            self._stopped = True
            for link in list(self._links):
                self._end(link, abort=True)
            self._cond.notify_all()
        if self._acceptor.is_alive() and self._acceptor is not threading.current_thread():
            self._acceptor.join()
        self._listener.close()  # only now: the acceptor no longer blocks on it
        with self._cond:
            threads = list(self._threads)
        for t in threads:
            t.join(STOP_JOIN_S)
        alive = [t.name for t in threads if t.is_alive()]
        assert not alive, f"proxy threads still running after stop: {alive}"

    def _spawn(self, target, role: str, *args) -> threading.Thread:
        t = threading.Thread(target=target, args=args, daemon=True,
                             name=f"faultproxy-{role}-{self.address}")
        with self._cond:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()
        return t

    def _end(self, link: _Link, abort: bool) -> None:
        """End ``link`` (the caller holds the lock): shut its sockets down to wake its pumps,
        or, with no pump running, close the client now (nobody else blocks on it)."""
        self._links.discard(link)
        if link.ended:
            return
        link.ended, link.abort = True, abort
        if link.pumps == 0:
            _close(link.client, abort)
            return
        for sock in (link.client, link.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already shut down, or the peer reset it

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed
            client.settimeout(None)
            with self._cond:
                if self._stopped or self._mode is Mode.RESET:
                    _close(client, abort=True)
                    continue
                link = _Link(client)
                self._links.add(link)
                self._spawn(self._connect, "connect", link)

    def _connect(self, link: _Link) -> None:
        """Dial the target for ``link`` once the link passes (never, while it drops)."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopped or self._mode is not Mode.HOLD)
            if link.ended or self._stopped or self._mode is Mode.DROP:
                return  # accepted and never answered: leaving drop (or stop) resets it
        try:
            server = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            with self._cond:  # the target is down: as it would look without the proxy
                self._end(link, abort=True)
            return
        server.settimeout(None)
        with self._cond:
            if link.ended:  # a fault or stop() came while we dialled
                _close(server, abort=True)
                return
            link.server, link.pumps = server, 2
            self._spawn(self._pump, "pump", link, link.client, server)
            self._spawn(self._pump, "pump", link, server, link.client)

    def _flow(self) -> Mode | None:
        """The mode a chunk just read meets (waiting out a hold); None once stopped."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopped or self._mode is not Mode.HOLD)
            return None if self._stopped else self._mode

    def _pump(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        """Copy one direction until either side ends, then end the whole connection."""
        try:
            while chunk := src.recv(CHUNK):
                mode = self._flow()  # held, not lost: TCP would retransmit it after a hold
                if mode is Mode.PASS:
                    dst.sendall(chunk)
                elif mode is not Mode.DROP:
                    break  # reset or stopped: the link is being ended
        except OSError:
            pass  # reset by a peer, or shut down by _end()
        with self._cond:  # a close is news that a held or dropping link does not carry either
            self._cond.wait_for(lambda: self._stopped or link.ended
                                or self._mode in (Mode.PASS, Mode.RESET))
            self._end(link, abort=False)
            link.pumps -= 1
            last = link.pumps == 0
        if last:
            _close(src, link.abort)
            _close(dst, link.abort)


def _close(sock: socket.socket, abort: bool) -> None:
    """Close ``sock``; with ``abort``, with a reset (RST), as a broken link looks to the peer."""
    try:
        if abort:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # the peer is gone already
    sock.close()
