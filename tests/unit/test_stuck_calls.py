"""The pieces that let a client leave a hung leader: which stuck calls to cancel (pure), and
ChannelPool.discard ending a blocking call in flight at once."""
from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc

from lib.rpc import SERVER_OPTIONS, ChannelPool
from lib.stuck_calls import InFlight, moved
from lib.types import TopicPartition

A, B = "127.0.0.1:1", "127.0.0.1:2"
P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _call(token: int, address: str, tps: tuple, stuck_at: float) -> InFlight:
    return InFlight(token, address, tps, stuck_at, lambda: None)


def test_a_stuck_call_whose_partition_leads_elsewhere_now_is_moved():
    leaders = {P0: B, P1: A}
    calls = [_call(1, A, (P0,), 0.0), _call(2, A, (P1,), 0.0), _call(3, A, (P1, P0), 0.0)]
    assert [c.token for c in moved(calls, leaders.get, 1.0)] == [1, 3]


def test_a_call_not_stuck_yet_is_left_alone_however_its_leader_moved():
    assert moved([_call(1, A, (P0,), 5.0)], {P0: B}.get, 1.0) == []


def test_a_partition_without_a_leader_keeps_its_call_where_it_is():
    # an election under way: there is nowhere better to send it
    assert moved([_call(1, A, (P0,), 0.0)], {}.get, 1.0) == []


def test_discarding_a_channel_ends_a_blocking_call_in_flight_at_once():
    release, entered = threading.Event(), threading.Event()

    def hang(req, ctx):
        entered.set()
        return release.wait(30) and b""

    class Hang(grpc.GenericRpcHandler):
        def service(self, details):
            return grpc.unary_unary_rpc_method_handler(hang)

    server = grpc.server(futures.ThreadPoolExecutor(2), options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers([Hang()])
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    pool = ChannelPool()
    try:
        stub = pool.get_bare(address).unary_unary("/x/hang")
        outcome: list[object] = []

        def call() -> None:
            try:
                outcome.append(stub(b"", timeout=30))
            except grpc.RpcError as exc:
                outcome.append(exc.code())

        t = threading.Thread(target=call)
        t.start()
        assert entered.wait(10), "the call never reached the server"  # it is in flight
        started = time.monotonic()
        pool.discard(address)
        t.join(10)
        assert outcome == [grpc.StatusCode.CANCELLED]
        assert time.monotonic() - started < 2
        assert pool.get_bare(address) is not None  # a new channel for the next call
    finally:
        release.set()
        pool.close()
        server.stop(0)
