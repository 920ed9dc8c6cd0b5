"""Files only their owner may read: secrets, keys and credentials, written and read one way;
and the data directories that hold them (PostgreSQL's rule for its data directory).

A master's state holds the token signing keys, a broker's data every record: a data
directory is the owner's alone (0700, files 0600), or, when the operator asks for group access
(``data_dir_group_access``, PostgreSQL's ``initdb --allow-group-access``), readable by the
owner's group too (0750, files 0640) -- never writable by the group, never open to others. A
server sets its umask with :func:`private_umask` first thing in its ``main`` and checks (or
creates) its data directory with :func:`own_data_dir` before it opens anything in it.
"""
from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from lib.errors import ConfigError, InvalidArgument

OWNER_ONLY_UMASK = 0o077  # new directories 0700, new files 0600
GROUP_READ_UMASK = 0o027  # new directories 0750, new files 0640
GROUP_ACCESS_KEY = "data_dir_group_access"  # the config key every server reads


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


def private_umask(group_access: bool = False) -> int:
    """Make every file and directory this process creates from now on its owner's alone
    (with ``group_access``: readable by its group too); the previous umask.

    A umask rather than a mode on each open: LMDB, pysyncobj's journal, the storage segments
    and the log files are created by code that asks for 0666/0777, and only the umask reaches
    all of them."""
    return os.umask(GROUP_READ_UMASK if group_access else OWNER_ONLY_UMASK)


def dir_mode(group_access: bool = False) -> int:
    """The widest mode a data directory may have: 0700, or 0750 with group access."""
    return 0o750 if group_access else 0o700


def data_dir_problem(path: str | os.PathLike, group_access: bool = False) -> str:
    """Why the existing directory ``path`` may not hold a server's data, in one line that
    names its mode and the ``chmod`` that fixes it; "" when it may (PostgreSQL's check)."""
    where = Path(path)
    mode = stat.S_IMODE(where.stat().st_mode)
    allowed = dir_mode(group_access)
    if not mode & 0o777 & ~allowed:
        return ""
    who = "others" if group_access else "group or others"
    hint = "" if group_access else f" (or allow group read: {GROUP_ACCESS_KEY} = true, chmod 750)"
    return (f"data directory {where} has mode {mode:04o}, open to {who}: "
            f"chmod {allowed:o} {shlex.quote(str(where))} fixes it{hint}")


def own_data_dir(path: str | os.PathLike, group_access: bool = False) -> Path:
    """``path`` as a server's data directory: created 0700 (0750 with ``group_access``) if it
    does not exist; an existing one that group or others can reach is refused with a
    :class:`ConfigError` (the server must not start: its files may already have been read,
    and it would go on writing secrets there)."""
    where = Path(path)
    try:
        where.mkdir(mode=dir_mode(group_access), parents=True, exist_ok=True)
        if not where.is_dir():
            raise ConfigError(f"data directory {where} is not a directory")
        problem = data_dir_problem(where, group_access)
    except OSError as exc:
        raise ConfigError(f"data directory {where}: {exc.strerror}") from None
    if problem:
        raise ConfigError(problem)
    return where


def enter_data_dir(path: str | os.PathLike, group_access: bool = False) -> Path:
    """What a server's ``main`` does once its config is read: the umask for the data it is
    about to write, then :func:`own_data_dir`."""
    private_umask(group_access)
    return own_data_dir(path, group_access)


def own_data_dirs(root: str | os.PathLike, children: list[str]) -> Path:
    """:func:`own_data_dir` for ``root`` and a check of those of its ``children`` (the data
    dirs of the servers ``tubeq cluster up`` runs under it) that exist: one ConfigError with
    a line per directory open to others, so the operator fixes them all at once."""
    top = own_data_dir(root)
    problems = [data_dir_problem(top / n) for n in children if (top / n).is_dir()]
    if any(problems):
        raise ConfigError("\n".join(p for p in problems if p))
    return top
