"""Checking a batch: the one place a batch's CRC and every frame's structure and CRC are
checked, with numpy over whole arrays (the broker on append, recovery on open)."""
from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from lib.errors import BatchTooLarge, CorruptRecord, RecordTooLarge
from lib.records.decode import iter_frames
from lib.records.encode import batch_crc
from lib.records.layout import (
    BATCH_HEADER,
    BATCH_TRANSACTIONAL,
    COLUMN_BYTES_PER_RECORD,
    COLUMNS_OF,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    FEW_COLUMNS,
    FLAG_CONTROL,
    FLAG_VALUE_ZLIB,
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    HEADER_ENTRY,
    HEADER_SIZE,
    I64,
    KNOWN_BATCH_FLAGS,
    KNOWN_FLAGS,
    MAGIC,
    MAX_HEADERS,
    MAX_RECORDS_PER_BATCH,
    READ_VERSIONS,
    U8,
    U32,
    crc32,
    frame_crcs,
    frame_headers,
    frame_starts,
    gather_u16,
    gather_u32,
    range_crcs,
)

CONTROL_REFUSED = ("it is flagged as a control record (a transaction marker): only the "
                   "transaction coordinator writes those")
INFLATE_STEP = 1 << 20  # bytes inflated at a time when checking a compressed value
FEW_FRAMES = FEW_COLUMNS  # up to this many frames, checked one by one (numpy's fixed cost)


class BatchView(NamedTuple):
    """A validated batch: header fields plus zero-copy numpy views of its columns and frames.
    (A named tuple: made on every Produce, where a frozen dataclass cost 1 us more.)"""

    count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    sizes: np.ndarray
    tag_hashes: np.ndarray
    timestamps: np.ndarray
    frames: memoryview
    transactional: bool = False  # BATCH_TRANSACTIONAL: part of its producer's transaction
    # False only where the check saw that no record has a (non-empty) key: the flusher then
    # writes their key hashes as zeros without reading the frames back (storage/keys.py).
    keyed: bool = True

    @property
    def frames_bytes(self) -> int:
        return len(self.frames)


def drop_records(view: BatchView, k: int) -> BatchView:
    """``view`` without its first ``k`` records, zero-copy (a batch whose head is already
    stored)."""
    if not 0 <= k <= view.count:
        raise ValueError(f"cannot drop {k} of {view.count} records")
    start = int(view.sizes[:k].sum(dtype=np.int64))
    return view._replace(count=view.count - k, base_sequence=view.base_sequence + k,
                         sizes=view.sizes[k:], tag_hashes=view.tag_hashes[k:],
                         timestamps=view.timestamps[k:], frames=view.frames[start:])


def parse_batch(
    data: bytes | bytearray | memoryview,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> BatchView:
    """Validate a batch with one CRC call over its header and columns, and whole-array checks
    of its frames (each with its own CRC); never loops per record in Python.

    Raises CorruptRecord (structure or CRC), BatchTooLarge or RecordTooLarge, each naming the
    problem and the limit.
    """
    buf = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    if len(buf) > max_batch_bytes:
        raise BatchTooLarge(
            f"batch is {len(buf)} bytes, limit {max_batch_bytes}",
            size=len(buf), limit=max_batch_bytes)
    if len(buf) < HEADER_SIZE:
        raise CorruptRecord(
            f"batch is {len(buf)} bytes, shorter than its {HEADER_SIZE}-byte header")
    magic, version, flags, _r, length, crc, count, pid, epoch, _r2, base_seq, _r3 = (
        BATCH_HEADER.unpack_from(buf)
    )
    if magic != MAGIC:
        raise CorruptRecord(f"bad batch magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version not in READ_VERSIONS:
        raise CorruptRecord(f"unsupported batch version {version}, this build reads "
                            f"{', '.join(map(str, READ_VERSIONS))}")
    if length != len(buf):
        raise CorruptRecord(f"batch length field says {length} bytes, got {len(buf)}")
    if batch_crc(buf, version) != crc:
        raise CorruptRecord("batch CRC mismatch: corrupted in transit or built wrongly")
    if flags & ~KNOWN_BATCH_FLAGS:
        raise CorruptRecord(f"unknown batch flags {flags:#04x}")
    view = _columns(buf, count, pid, epoch, base_seq, max_message_bytes)
    if flags & BATCH_TRANSACTIONAL:
        if pid < 0:
            raise CorruptRecord("a transactional batch needs a producer id (>= 0)")
        return view._replace(transactional=True)
    return view


def _columns(buf: memoryview, count: int, pid: int, epoch: int, base_seq: int,
             max_message_bytes: int) -> BatchView:
    frames_at = HEADER_SIZE + COLUMN_BYTES_PER_RECORD * count
    if count < 1 or count > MAX_RECORDS_PER_BATCH or frames_at > len(buf):
        raise CorruptRecord(f"batch record count {count} does not fit its {len(buf)} bytes")
    frames = buf[frames_at:]
    keyed = True  # a few frames are not looked at for keys
    if count <= FEW_FRAMES:
        # A handful of records (send_sync): one struct call reads the columns as lists, and
        # Python's sum/min/max and list compares beat a dozen numpy calls.
        listed = COLUMNS_OF[count].unpack_from(buf, HEADER_SIZE)
        sizes, tags, times = listed[:count], listed[count:2 * count], listed[2 * count:]
        _check_total(sum(sizes), len(frames))
        _check_range(min(sizes), max(sizes), max_message_bytes)
        _check_listed(few_columns(frames, sizes), tags, times)
    columns = (np.frombuffer(buf, U32, count, HEADER_SIZE),
               np.frombuffer(buf, U32, count, HEADER_SIZE + 4 * count),
               np.frombuffer(buf, I64, count, HEADER_SIZE + 8 * count))
    if count > FEW_FRAMES:
        sizes = columns[0]
        starts = frame_starts(sizes)  # the frames' total from it: one reduction fewer
        _check_total(int(starts[-1]) + int(sizes[-1]), len(frames))
        if np.count_nonzero((sizes < FRAME_HEADER_SIZE) | (sizes > max_message_bytes)):
            _check_range(int(sizes.min()), int(sizes.max()), max_message_bytes)
        keyed = check_frames(frames, *columns, starts=starts)
    return BatchView(count, pid, epoch, base_seq, *columns, frames, keyed=keyed)


def _check_total(total: int, frame_bytes: int) -> None:
    """The size column against the frame bytes."""
    if total != frame_bytes:
        raise CorruptRecord("batch frame sizes do not add up to its frame bytes")


def _check_range(smallest: int, biggest: int, max_message_bytes: int) -> None:
    """The size column against the frame header and the message limit."""
    if smallest < FRAME_HEADER_SIZE:
        raise CorruptRecord(f"a frame is shorter than the {FRAME_HEADER_SIZE}-byte frame header")
    if biggest > max_message_bytes:
        raise RecordTooLarge(
            f"a message is {biggest} bytes, limit {max_message_bytes}",
            size=biggest, limit=max_message_bytes,
        )


def check_frames(frames: memoryview, sizes: np.ndarray, tag_hashes: np.ndarray,
                 timestamps: np.ndarray, starts: np.ndarray | None = None) -> bool:
    """:func:`frame_columns`, and the batch's tag-hash and timestamp columns must agree with
    the frames (the index is built from the columns and rebuilt from the frames). Returns
    whether a record may have a key (False: none has one; a few frames are not looked at)."""
    if len(sizes) <= FEW_FRAMES:
        _check_listed(few_columns(frames, sizes.tolist()), tag_hashes.tolist(),
                      timestamps.tolist())
        return True
    tags, times, keyed = _many_columns(frames, sizes, starts=starts)
    if times.tobytes() != timestamps.astype(I64, copy=False).tobytes():  # 10x cheaper than
        _require(times == timestamps,  # comparing arrays; a mismatch then names the frame
                 "its timestamp disagrees with the batch timestamp column")
    if tags.tobytes() != tag_hashes.astype(U32, copy=False).tobytes():
        _require(tags == tag_hashes, "its tag disagrees with the batch tag-hash column")
    return keyed


def _check_listed(found: tuple[list[int], list[int]], tag_hashes: Sequence[int],
                  timestamps: Sequence[int]) -> None:
    """:func:`check_frames`' column checks for columns read as lists."""
    tags, times = found
    if times != list(timestamps):
        _require(np.array(times) == np.array(timestamps),
                 "its timestamp disagrees with the batch timestamp column")
    if tags != list(tag_hashes):
        _require(np.array(tags) == np.array(tag_hashes),
                 "its tag disagrees with the batch tag-hash column")


def frame_columns(frames: memoryview, sizes: np.ndarray, head: np.ndarray | None = None,
                  *, contents: bool = True, known: int = KNOWN_FLAGS
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Check every frame of a run the way decoding will and return each frame's tag hash and
    timestamp: the one frame check of the broker (append) and of recovery (chunk scan).

    Length field, known flags, tag/key/headers/value lengths adding up to the frame (headers
    walked with one numpy pass per header position) and each frame's CRC. Whole-array numpy
    for the structure; the CRCs are one C-level ``map`` of ``zlib.crc32`` over the frame
    slices (no Python bytecode per record). Raises CorruptRecord naming the first bad frame.
    Up to :data:`FEW_FRAMES` frames are checked one by one instead (:func:`few_columns`).
    ``head``: the frames' headers if the caller gathered them already (they are checked here).
    ``contents=False`` checks the structure alone, not each frame's CRC nor that compressed
    values inflate: for frames whose bytes a CRC of the whole run vouches for, a follower's
    copy of its leader's frames (the leader checked each frame when it came in). ``known``:
    the frame flags allowed (a store's frames may be control records, a producer's not).
    """
    if len(sizes) <= FEW_FRAMES:
        tags, times = few_columns(frames, sizes.tolist(), contents, known)
        return np.array(tags, U32), np.array(times, I64)
    return many_columns(frames, sizes, head, contents, known)


def many_columns(frames: memoryview, sizes: np.ndarray, head: np.ndarray | None = None,
                  contents: bool = True, known: int = KNOWN_FLAGS
                  ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`frame_columns` over whole arrays."""
    tags, times, _keyed = _many_columns(frames, sizes, head, contents, known)
    return tags, times


def _many_columns(frames: memoryview, sizes: np.ndarray, head: np.ndarray | None = None,
                  contents: bool = True, known: int = KNOWN_FLAGS,
                  starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
    """:func:`many_columns`, and whether any record has a non-empty key.

    The structure checks are folded into one boolean array counted once: numpy's fixed cost
    per call (a reduction ~2 us) is what a batch of 30-300 records pays most for. Only a
    batch that fails is checked again check by check (:func:`_structure_fault`), so the
    frame and the problem named are those of the checks in their order."""
    if starts is None:
        starts = frame_starts(sizes)
    ends = starts + sizes
    u8 = np.frombuffer(frames, U8)
    if head is None:
        head = frame_headers(u8, starts)
    key_lens = head["key_len"].astype(np.int64)
    tag_lens = head["tag_len"].astype(np.int64)
    after_key = starts + (tag_lens + FRAME_HEADER_SIZE) + np.maximum(key_lens, 0)
    fits = (head["length"] == sizes) & (head["flags"] & np.uint8(~known & 0xFF) == 0)
    fits &= key_lens >= -1
    counts = head["header_count"]
    pos = after_key
    if np.count_nonzero(counts):  # walked only over frames whose fields before them fit
        fits &= (after_key <= ends) & (counts <= MAX_HEADERS)
        if np.count_nonzero(fits) != len(fits):
            _structure_fault(u8, head, sizes, known, key_lens, after_key, ends)
        pos = _walk_headers(u8, after_key, ends, counts)
    fits &= pos + head["value_len"] == ends  # (no headers: also says the tag and key fit)
    if np.count_nonzero(fits) != len(fits):
        _structure_fault(u8, head, sizes, known, key_lens, after_key, ends)
    if contents:
        crcs = frame_crcs(frames, starts, sizes)
        if crcs.tobytes() != head["crc"].tobytes():
            _require(crcs == head["crc"], "its CRC does not match its bytes")
        if np.count_nonzero(head["flags"] & np.uint8(FLAG_VALUE_ZLIB)):
            _check_compressed(frames, head, ends)
    hashes = np.zeros(len(sizes), U32)
    if np.count_nonzero(tag_lens):
        tagged = np.flatnonzero(tag_lens)
        at = starts[tagged] + FRAME_HEADER_SIZE
        hashes[tagged] = np.maximum(range_crcs(frames, at, at + tag_lens[tagged]), 1)  # tag_hash
    return hashes, head["ts"], bool(np.count_nonzero(key_lens > 0))


def _structure_fault(u8: np.ndarray, head: np.ndarray, sizes: np.ndarray, known: int,
                     key_lens: np.ndarray, after_key: np.ndarray, ends: np.ndarray) -> None:
    """Raise for the first structure check that some frame fails, naming the first such
    frame: the checks one by one, in the order :func:`few_columns` makes them."""
    _require(head["length"] == sizes, "its length field disagrees with the batch size column")
    _require(head["flags"] & np.uint8(FLAG_CONTROL & ~known) == 0, CONTROL_REFUSED)
    _require(head["flags"] & ~np.uint8(known) == 0, "it has unknown flags")
    _require(key_lens >= -1, "its key length is negative")
    _require(after_key <= ends, "its tag and key run past the end of the frame")
    pos = _walk_headers(u8, after_key, ends, head["header_count"])
    _require(pos + head["value_len"] == ends, "its field lengths do not add up to the frame "
             "length")
    raise AssertionError("a frame failed the folded structure check but none of its parts")


def few_columns(frames: memoryview, sizes: Sequence[int], contents: bool = True,
                known: int = KNOWN_FLAGS) -> tuple[list[int], list[int]]:
    """:func:`frame_columns` frame by frame, for batches of a few records (``send_sync``, low
    rates): there the two dozen whole-array numpy calls cost ~50 µs whatever the batch size,
    ten times these checks. The same checks with the same messages; where a batch has several
    faults the two may name different ones (tests/unit/test_batch_fuzz.py holds them equal
    otherwise)."""
    hashes, times = [], []
    start = 0
    for i, size in enumerate(sizes):
        end = start + size
        length, crc, flags, _a, ts, tag_len, key_len, n_headers, value_len = \
            FRAME_HEADER.unpack_from(frames, start)
        bad = _first_fault(frames, start, end, length, flags, tag_len, key_len, n_headers,
                           value_len, known)
        if bad is None and contents and crc32(frames[start + 8:end]) != crc:
            bad = "its CRC does not match its bytes"
        if bad is not None:
            raise CorruptRecord(f"frame {i} of the batch is malformed: {bad}")
        if flags & FLAG_VALUE_ZLIB and contents:
            _inflates(frames[end - value_len:end], i)
        tag_at = start + FRAME_HEADER_SIZE
        hashes.append(max(crc32(frames[tag_at:tag_at + tag_len]), 1) if tag_len else 0)
        times.append(ts)
        start = end
    return hashes, times


def _first_fault(frames: memoryview, start: int, end: int, length: int, flags: int,
                 tag_len: int, key_len: int, n_headers: int, value_len: int,
                 known: int = KNOWN_FLAGS) -> str | None:
    """What is structurally wrong with one frame (None: nothing), in the order and words of
    the whole-array checks."""
    if length != end - start:
        return "its length field disagrees with the batch size column"
    if flags & FLAG_CONTROL & ~known:
        return CONTROL_REFUSED
    if flags & ~known & 0xFF:
        return "it has unknown flags"
    if key_len < -1:
        return "its key length is negative"
    pos = start + FRAME_HEADER_SIZE + tag_len + max(key_len, 0)
    if pos > end:
        return "its tag and key run past the end of the frame"
    if n_headers > MAX_HEADERS:
        return f"it has more than {MAX_HEADERS} headers"
    for _ in range(n_headers):
        if pos + HEADER_ENTRY.size > end:
            return "its headers run past its end"
        name_len, header_len = HEADER_ENTRY.unpack_from(frames, pos)
        pos += HEADER_ENTRY.size + name_len + header_len
        if pos > end:
            return "its headers run past its end"
    if pos + value_len != end:
        return "its field lengths do not add up to the frame length"
    return None


def _check_compressed(frames: memoryview, head: np.ndarray, ends: np.ndarray) -> None:
    """Every zlib-flagged value must inflate completely, as the consumer will inflate it.

    The one check that needs Python per record, and only for compressed records (the producer
    compresses a value only when that saves bytes); inflated in 1 MiB steps, output discarded,
    so a hostile value cannot make the broker hold more than that."""
    for i in np.flatnonzero(head["flags"] & FLAG_VALUE_ZLIB).tolist():
        _inflates(frames[int(ends[i]) - int(head["value_len"][i]):int(ends[i])], i)


def _inflates(value: memoryview, i: int) -> None:
    """Frame ``i``'s compressed value must inflate completely (output discarded)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(value, INFLATE_STEP)
        while out and not inflater.eof:
            out = inflater.decompress(inflater.unconsumed_tail, INFLATE_STEP)
    except zlib.error as exc:
        raise CorruptRecord(f"frame {i} of the batch is malformed: its compressed value "
                            f"does not inflate ({exc})") from None
    if not inflater.eof or inflater.unused_data:
        raise CorruptRecord(f"frame {i} of the batch is malformed: its compressed value is "
                            "truncated or has bytes after its end")


def frame_sizes(frames: memoryview) -> np.ndarray:
    """The size of each frame of a run, by its length field (recovery has no size column)."""
    return np.fromiter(map(len, iter_frames(frames)), U32)


def _walk_headers(u8: np.ndarray, pos: np.ndarray, ends: np.ndarray,
                  counts: np.ndarray) -> np.ndarray:
    """Positions after each frame's headers; header k of every frame is read in one pass."""
    _require(counts <= MAX_HEADERS, f"it has more than {MAX_HEADERS} headers")
    most = int(counts.max()) if len(counts) else 0
    if most == 0:
        return pos
    pos = pos.copy()
    for k in range(most):
        live = np.flatnonzero(counts > k)
        at = pos[live]
        _require_at(live, at + HEADER_ENTRY.size <= ends[live], "its headers run past its end")
        lens = gather_u16(u8, at).astype(np.int64) + gather_u32(u8, at + 2)
        pos[live] = at + HEADER_ENTRY.size + lens
        _require_at(live, pos[live] <= ends[live], "its headers run past its end")
    return pos


def _require(ok: np.ndarray, problem: str) -> None:
    if np.count_nonzero(ok) != len(ok):  # a third of ok.all()'s cost
        raise CorruptRecord(f"frame {int(np.argmin(ok))} of the batch is malformed: {problem}")


def _require_at(index: np.ndarray, ok: np.ndarray, problem: str) -> None:
    if np.count_nonzero(ok) != len(ok):
        raise CorruptRecord(f"frame {int(index[np.argmin(ok)])} of the batch is malformed: "
                            f"{problem}")
