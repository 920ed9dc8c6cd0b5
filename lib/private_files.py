"""Files only their owner may read: secrets, keys and credentials, written and read one way."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from lib.errors import InvalidArgument


def write_private(path: str | os.PathLike, data: str | bytes, mode: int = 0o600) -> None:
    """``data`` in a new file with ``mode`` from its creation: a secret is never readable by
    others, not even for a moment, and never inherits an old file's wider mode (an old file
    is removed first)."""
    where = Path(path)
    where.unlink(missing_ok=True)
    fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def read_private(path: str | os.PathLike, what: str) -> str:
    """The text of ``what`` (a credentials file, the cluster secret, ...) at ``path``, which
    must be readable by its owner only, as ssh insists for its keys."""
    where = Path(path)
    try:
        mode = where.stat().st_mode
        text = where.read_text()
    except OSError as exc:
        raise InvalidArgument(f"{what} {where}: {exc.strerror}") from None
    if mode & 0o077:
        raise InvalidArgument(f"{what} {where} is open to other users (mode "
                              f"{stat.S_IMODE(mode):o}): chmod 600 it")
    return text
