"""Producer input checks that need no cluster, and an unreachable master list."""
from __future__ import annotations

import socket
import time

import pytest

from lib.errors import ClientClosed, ConfigError, InvalidArgument, InvalidName, Unavailable
from lib.producer.producer import Producer


def _dead_address() -> str:
    """A local port nobody listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def producer():
    p = Producer(_dead_address(), request_timeout_ms=1000)
    yield p
    p.close(timeout=2)


@pytest.mark.parametrize("settings, message", [
    ({"linger_ms": -1}, "linger_ms"),
    ({"batch_bytes": 0}, "batch_bytes"),
    ({"batch_bytes": 1 << 30}, "batch_bytes"),
    ({"buffer_bytes": 10, "batch_bytes": 100}, "buffer_bytes"),
    ({"compression": "lz4"}, "compression"),
    ({"retries": -1}, "retries"),
    ({"no_such_setting": 1}, "no_such_setting"),
])
def test_producer_refuses_bad_settings_with_the_setting_named(settings, message):
    with pytest.raises(ConfigError, match=message):
        Producer("127.0.0.1:1", **settings)


def test_producer_refuses_a_bad_master_list():
    with pytest.raises(InvalidArgument, match="master"):
        Producer("not-an-address")


def test_send_refuses_a_bad_topic_name_before_any_network_call(producer):
    with pytest.raises(InvalidName, match="topic name"):
        producer.send("../etc", b"v")


@pytest.mark.parametrize("value, key", [("text", None), (b"v", "text-key"), (None, None)])
def test_send_refuses_values_and_keys_that_are_not_bytes(producer, value, key):
    with pytest.raises(InvalidArgument, match="must be bytes"):
        producer.send("t", value, key=key)


def test_send_with_an_unreachable_master_list_raises_unavailable_within_the_timeout(producer):
    start = time.monotonic()
    with pytest.raises(Unavailable, match="no active master"):
        producer.send("t", b"v")
    assert time.monotonic() - start < 5


def test_send_after_close_raises_client_closed(producer):
    producer.close()
    with pytest.raises(ClientClosed):
        producer.send("t", b"v")


def test_close_with_nothing_sent_returns_quickly():
    p = Producer(_dead_address())
    start = time.monotonic()
    p.close()
    assert time.monotonic() - start < 2


@pytest.mark.parametrize("value, key, flags", [
    (b"", None, 0), (b"v" * 1000, None, 0), (b"value", b"", 0), (b"value", b"key", 1),
])
def test_plain_frames_are_byte_identical_to_the_codec(value, key, flags):
    from lib.records import Record, decode_frame, encode_frame, plain_frame

    frame = b"".join(plain_frame(value, key, 1234, flags))
    assert frame == encode_frame(Record(value, key, None, {}, 1234, flags=flags))
    if not flags:
        rec = decode_frame(frame)
        assert (rec.value, rec.key, rec.timestamp) == (value, key, 1234)


def test_bulk_values_take_arrow_binary_arrays_sliced_or_not():
    import pyarrow as pa

    from lib.producer.bulk import bulk_values
    for kind in (pa.binary(), pa.large_binary()):
        arr = pa.array([b"a", b"", b"ccc", b"dd"], kind)
        assert bulk_values(arr) == [b"a", b"", b"ccc", b"dd"]
        assert bulk_values(arr[1:3]) == [b"", b"ccc"]
    assert bulk_values([b"x"]) == [b"x"]
