"""One exception tree for the whole project.

Every error carries the data a caller needs to act on it (topic, partition, offsets, limits) and
two pieces of advice: ``retriable`` (the same call may succeed later) and ``refresh_metadata``
(routes may be stale: ask the master again before retrying). Servers map these to gRPC status
codes through one table (added with the wire protocol); nothing here does I/O.
"""
from __future__ import annotations

from typing import Any


class TubeqError(Exception):
    """Base of every error raised by tubeq."""

    code = "UNKNOWN"
    retriable = False
    refresh_metadata = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __getattr__(self, name: str) -> Any:
        # Lets callers write err.earliest instead of err.details["earliest"].
        details = self.__dict__.get("details", {})
        if name in details:
            return details[name]
        raise AttributeError(name)


class InvalidArgument(TubeqError):
    """The request itself is wrong (bad name, bad value); retrying it unchanged cannot help."""

    code = "INVALID_ARGUMENT"


class InvalidName(InvalidArgument):
    code = "INVALID_NAME"


class CorruptRecord(TubeqError):
    """A batch or frame failed its CRC or structural checks."""

    code = "CORRUPT_RECORD"


class RecordTooLarge(InvalidArgument):
    code = "RECORD_TOO_LARGE"


class BatchTooLarge(InvalidArgument):
    code = "BATCH_TOO_LARGE"


class OffsetOutOfRange(TubeqError):
    """The offset is below the earliest or above the latest offset of the partition."""

    code = "OFFSET_OUT_OF_RANGE"


class UnknownPartition(TubeqError):
    code = "UNKNOWN_PARTITION"
    refresh_metadata = True


class StoreClosed(TubeqError):
    code = "STORE_CLOSED"
    retriable = True
    refresh_metadata = True


class ConfigError(TubeqError):
    """A configuration file or override is invalid; raised before anything starts."""

    code = "CONFIG_ERROR"


class StorageError(TubeqError):
    """The disk refused an operation (write, fsync); the store stops accepting appends."""

    code = "STORAGE_ERROR"


class Unavailable(TubeqError):
    """The server could not be reached or did not answer in time."""

    code = "UNAVAILABLE"
    retriable = True
    refresh_metadata = True
