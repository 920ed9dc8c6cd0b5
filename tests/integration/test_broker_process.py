"""`python -m broker` as a real process, before any master answers."""
from __future__ import annotations

import json
import signal
import socket

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lib import errors
from lib.proto import broker_pb2 as pb
from lib.proto import broker_pb2_grpc
from lib.rpc import channel, invoke
from tests.cluster import ServerProcess


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lone_broker(tmp_path):
    """A broker whose master list points at a port nobody listens on."""
    d = tmp_path / "b1"
    proc = ServerProcess("broker", d, [
        "--data-dir", str(d), "--broker-id", "1", "--masters", f"127.0.0.1:{_free_port()}",
        "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0",
        "--auth", "none"])  # without a master it could verify no token
    yield proc.start()
    proc.stop()


def test_broker_is_ready_and_serving_while_the_master_is_unreachable(lone_broker):
    info = lone_broker.info
    assert info["role"] == "broker" and info["broker_id"] == 1
    assert info["address"].startswith("127.0.0.1:") and info["metrics"].startswith("127.0.0.1:")
    ch = channel(lone_broker.address)
    try:
        res = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert res.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(errors.UnknownTopic):
            invoke(broker_pb2_grpc.BrokerStub(ch).Produce,
                   pb.ProduceRequest(topic="t", partition=0, batch=b"x"), 5)
    finally:
        ch.close()


def test_broker_stops_cleanly_on_sigterm_and_logs_json(lone_broker):
    lone_broker.signal(signal.SIGTERM)
    assert lone_broker.popen.wait(15) == 0
    lines = [json.loads(line) for line in lone_broker.log_tail(200).splitlines()
             if line.startswith("{")]
    assert any(line["event"] == "broker.stopped" for line in lines)
    assert all(line["role"] == "broker" and line["id"] == "1" for line in lines)
