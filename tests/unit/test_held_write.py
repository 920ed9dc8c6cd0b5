"""storage/held_write.py: small writes keep the GIL (libc through ctypes.PyDLL) and behave as
``os.pwrite`` does; large ones are ``os.pwrite``."""
import errno
import os

import numpy as np
import pytest

from storage import held_write
from storage.held_write import DEFAULT_HELD_WRITE_BYTES, pwrite


@pytest.fixture
def fd(tmp_path):
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    yield fd
    os.close(fd)


def test_small_writes_skip_os_pwrite_and_land_where_asked(fd, monkeypatch):
    def refuse(*args):
        raise AssertionError("a small write went through os.pwrite (it lets the GIL go)")

    monkeypatch.setattr(held_write.os, "pwrite", refuse)
    assert pwrite(fd, memoryview(b"hello"), 3) == 5  # read-only bytes
    arr = np.arange(64, dtype=np.uint8)
    assert pwrite(fd, memoryview(arr)[8:16], 10) == 8  # a slice of a numpy block
    assert os.pread(fd, 32, 0) == bytes(3) + b"hello" + bytes(2) + bytes(range(8, 16))
    far = 5 << 30  # past 32 bits: the offset is a 64-bit off_t (a sparse file, no space used)
    assert pwrite(fd, memoryview(b"far"), far) == 3 and os.pread(fd, 3, far) == b"far"


def test_large_writes_are_os_pwrite(fd, monkeypatch):
    calls = []
    real = os.pwrite
    monkeypatch.setattr(held_write.os, "pwrite", lambda *a: calls.append(len(a[1])) or real(*a))
    data = os.urandom(DEFAULT_HELD_WRITE_BYTES + 1)
    assert pwrite(fd, memoryview(data), 100) == len(data)
    assert calls == [len(data)]
    assert os.pread(fd, len(data), 100) == data


def test_a_failed_held_write_raises_oserror_with_its_errno(tmp_path):
    ro = os.open(tmp_path / "ro", os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError) as info:
            pwrite(ro, memoryview(b"x"), 0)
        assert info.value.errno == errno.EBADF
    finally:
        os.close(ro)


def test_a_limit_of_zero_lets_every_write_go_through_os_pwrite(fd, monkeypatch):
    calls = []
    real = os.pwrite
    monkeypatch.setattr(held_write.os, "pwrite", lambda *a: calls.append(len(a[1])) or real(*a))
    monkeypatch.setattr(held_write, "held_write_max_bytes", held_write.held_write_max_bytes)
    held_write.configure(0)
    assert pwrite(fd, memoryview(b"abc"), 0) == 3
    assert calls == [3] and os.pread(fd, 3, 0) == b"abc"


@pytest.mark.parametrize("value", [-1, 64 * 2**20 + 1])
def test_the_broker_refuses_a_held_write_limit_out_of_range(value):
    from broker.config import BrokerConfig
    from lib.errors import ConfigError

    with pytest.raises(ConfigError, match="held_write_bytes must be within 0..64 MiB"):
        BrokerConfig(data_dir="/tmp/unused", broker_id=1, held_write_bytes=value).validate()
