"""Record batch codec: the one format used on the wire and on disk. Pure bytes, no I/O.

``layout.py`` the format (sizes, flags, limits, :class:`Record`), ``encode.py`` frames and
batches, ``check.py`` the broker's and recovery's checks (batch CRC, frame structure and
CRCs), ``decode.py`` frames back into records, ``columns.py`` fetched runs as columns
(checked as the broker checks them, records built over whole arrays). Import from
``lib.records``.

Batch layout (little-endian)::

    header   40 bytes  magic "TQRB", version, flags, reserved, length, crc,
                       count, producer_id, producer_epoch, reserved, base_sequence, reserved
    sizes    u32[count]   frame sizes        -- column arrays let the broker compute positions,
    tags     u32[count]   tag hashes         -- index entries and tag filters with numpy over
    times    i64[count]   timestamps (ms)    -- whole arrays, never per record
    frames   sum(sizes) bytes

``crc`` (version 2) is one CRC-32 over the header and the columns; every frame carries its own
CRC over its bytes, which every reader checks (version 1's batch CRC also covered the frames,
so each frame byte was CRC'd twice). Each frame is self-describing so a store can be rebuilt
from its data log alone::

    length u32 | crc u32 | flags u8 | attrs u8 | timestamp i64 | tag_len u16 | key_len i32
    | header_count u16 | value_len u32 | tag | key | headers (name_len u16, value_len u32,
    name, value)* | value

The frame crc covers every byte after the crc field. ``key_len`` is -1 for "no key".
"""
from __future__ import annotations

from lib.records.check import (
    BatchView,
    check_frames,
    drop_records,
    frame_columns,
    frame_sizes,
    parse_batch,
)
from lib.records.columns import FrameColumns
from lib.records.decode import (
    decode_frame,
    decode_frames,
    decode_records,
    decode_span,
    iter_frames,
)
from lib.records.encode import (
    EncodedRun,
    assemble_batch,
    batch_crc,
    batch_head,
    control_frame,
    encode_batch,
    encode_columns,
    encode_frame,
    encode_run,
    headers_of,
    plain_frame,
)
from lib.records.layout import (
    BATCH_HEADER,
    BATCH_TRANSACTIONAL,
    COLUMN_BYTES_PER_RECORD,
    CRC_AT,
    CRC_END,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    FLAG_CONTROL,
    FLAG_VALUE_ZLIB,
    FRAME_DTYPE,
    FRAME_FLAGS_AT,
    FRAME_HEAD,
    FRAME_HEADER_SIZE,
    FRAME_TAG_LEN_AT,
    FRAME_TAIL,
    FRAME_VALUE_LEN_AT,
    HEADER_ENTRY,
    HEADER_SIZE,
    KNOWN_FLAGS,
    MAGIC,
    MAX_HEADERS,
    MAX_RECORDS_PER_BATCH,
    MAX_TAG_BYTES,
    STORED_FLAGS,
    VERSION,
    Record,
    frame_headers,
    frame_starts,
    gather_u16,
    gather_u32,
    tag_hash,
)

__all__ = [
    "EncodedRun",
    "encode_columns",
    "encode_run",
    "BATCH_HEADER",
    "BATCH_TRANSACTIONAL",
    "BatchView",
    "COLUMN_BYTES_PER_RECORD",
    "CRC_AT",
    "CRC_END",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "FLAG_CONTROL",
    "FLAG_VALUE_ZLIB",
    "FRAME_DTYPE",
    "FRAME_HEAD",
    "FRAME_HEADER_SIZE",
    "FRAME_FLAGS_AT",
    "FRAME_TAG_LEN_AT",
    "FRAME_TAIL",
    "FRAME_VALUE_LEN_AT",
    "HEADER_ENTRY",
    "HEADER_SIZE",
    "KNOWN_FLAGS",
    "STORED_FLAGS",
    "MAGIC",
    "MAX_HEADERS",
    "MAX_RECORDS_PER_BATCH",
    "MAX_TAG_BYTES",
    "Record",
    "VERSION",
    "assemble_batch",
    "batch_crc",
    "batch_head",
    "control_frame",
    "check_frames",
    "decode_frame",
    "decode_frames",
    "decode_records",
    "FrameColumns",
    "decode_span",
    "encode_batch",
    "encode_frame",
    "drop_records",
    "frame_columns",
    "frame_headers",
    "frame_sizes",
    "frame_starts",
    "gather_u16",
    "gather_u32",
    "headers_of",
    "iter_frames",
    "parse_batch",
    "plain_frame",
    "tag_hash",
]
