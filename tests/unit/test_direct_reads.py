"""Direct reads (storage/direct.py): the same bytes as a buffered read, wherever they start and
end, and None (read as usual) where the filesystem refuses O_DIRECT."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from storage import direct
from storage.direct import ALIGN, pread_direct

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="O_DIRECT via /proc is Linux's")


@pytest.fixture
def data_file(tmp_path: Path):
    data = os.urandom(5 * ALIGN + 123)
    path = tmp_path / "seg.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    if pread_direct(fd, 1, 0) is None:
        os.close(fd)
        pytest.skip("this filesystem refuses O_DIRECT")
    yield fd, data, path
    os.close(fd)


@pytest.mark.parametrize("offset,length", [
    (0, ALIGN), (1, 10), (ALIGN - 1, 2), (3, 3 * ALIGN), (ALIGN, 4 * ALIGN + 123),
    (5 * ALIGN, 123), (5 * ALIGN + 100, 500),  # runs past the end: short, as os.pread
    (5 * ALIGN + 123, 10), (7 * ALIGN, 10),  # at and past the end: nothing
])
def test_a_direct_read_returns_what_a_buffered_read_returns(data_file, offset, length):
    fd, data, _ = data_file
    assert pread_direct(fd, length, offset) == os.pread(fd, length, offset) \
        == data[offset:offset + length]


def test_a_file_unlinked_since_it_was_opened_still_reads(data_file):
    fd, data, path = data_file
    path.unlink()  # retention deleted the segment while a reader held it
    assert pread_direct(fd, 100, 7) == data[7:107]


def test_reads_too_long_for_the_buffer_or_empty_are_left_to_the_page_cache(data_file,
                                                                           monkeypatch):
    fd, _, _ = data_file
    assert pread_direct(fd, 0, 0) is None
    monkeypatch.setattr(direct, "MAX_DIRECT_BYTES", ALIGN)
    assert pread_direct(fd, ALIGN, 1) is None  # spans two aligned blocks


def test_a_filesystem_that_refuses_o_direct_reads_as_usual(data_file, monkeypatch):
    fd, _, _ = data_file
    real_open = os.open

    def refusing(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")  # what tmpfs said before Linux 6.6
        return real_open(path, flags, *args)
    monkeypatch.setattr(os, "open", refusing)
    assert pread_direct(fd, 10, 0) is None
