"""Reads that bypass the page cache (``O_DIRECT``), for data the page cache window dropped.

Why: on a VM a page the guest has left free for a while is handed back to the host, and the
next use of it is refilled by the hypervisor: a buffered read of data that is no longer cached
takes such pages from the free list, and on the 2-core development VM it costs about 1.6 µs of
CPU per KiB (0.8-0.9 s per 512 MiB), ten times a read into memory the process keeps using. A
direct read lands in a buffer each thread reuses (0.08 s per 512 MiB) and leaves the page
cache to the writer, which is what the window keeps it for.

``O_DIRECT`` wants the file offset, the length and the buffer aligned to the device's block;
:data:`ALIGN` (4 KiB) covers the usual 512 B and 4 KiB blocks. A filesystem that refuses it
(tmpfs, some FUSE mounts) makes :func:`pread_direct` return None, and the caller reads as
before.
"""
from __future__ import annotations

import mmap
import os
import threading

ALIGN = 4096
MAX_DIRECT_BYTES = 16 << 20  # longer reads go through the page cache (bounds each buffer)
_O_DIRECT = getattr(os, "O_DIRECT", 0)
_local = threading.local()


def pread_direct(fd: int, length: int, offset: int) -> bytes | None:
    """``length`` bytes of the file open as ``fd`` from ``offset``, read around the page cache;
    None where a direct read is not possible (no O_DIRECT here, the filesystem refuses it, the
    read is too long): then read it as usual. Fewer bytes than asked at the end of the file,
    as ``os.pread``."""
    lo = offset - offset % ALIGN
    hi = -(-(offset + length) // ALIGN) * ALIGN
    if not _O_DIRECT or length <= 0 or hi - lo > MAX_DIRECT_BYTES:
        return None
    try:
        # A second open file description of the same file (even if it was unlinked since):
        # O_DIRECT belongs to the description, and the shared fd stays buffered.
        direct = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | _O_DIRECT)
    except OSError:
        return None
    try:
        buf = _buffer(hi - lo)
        got = os.preadv(direct, [memoryview(buf)[:hi - lo]], lo)
    except OSError:
        return None
    finally:
        os.close(direct)
    start = offset - lo
    return buf[start:min(got, start + length)] if got > start else b""


def _buffer(size: int) -> mmap.mmap:
    """This thread's aligned read buffer, grown to ``size`` (an anonymous mapping is
    page-aligned, and reusing it keeps its pages backed)."""
    buf = getattr(_local, "buf", None)
    if buf is None or len(buf) < size:
        if buf is not None:
            buf.close()
        buf = _local.buf = mmap.mmap(-1, max(size, 1 << 20))
    return buf
