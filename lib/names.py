"""Names of topics and groups: they become directory names, so they are checked strictly."""
from __future__ import annotations

import re

from lib.errors import InvalidName

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,248}$")
MAX_NAME_LEN = 249
SHOWN_CHARS = 64  # an error echoes at most this much of a bad name: the input is unbounded


def check_name(name: object, kind: str = "topic") -> str:
    """Return ``name`` if it is a valid topic/group name, else raise :class:`InvalidName`.

    The pattern already excludes ``/``, ``\\``, NUL and a leading dot, so ``.`` and ``..`` can
    never pass; they are rejected explicitly anyway so the rule survives a pattern change.
    """
    if not isinstance(name, str) or name in (".", "..") or not NAME_RE.match(name):
        raise InvalidName(
            f"invalid {kind} name {_shown(name)}: must match {NAME_RE.pattern} "
            f"(1 to {MAX_NAME_LEN} characters: letters, digits, '.', '_', '-'; "
            "not starting with '.', '_' or '-')",
            name=_shown(name),
            kind=kind,
        )
    return name


def _shown(name: object) -> str:
    """``repr(name)``, cut to :data:`SHOWN_CHARS` with the full length said."""
    text = repr(name)
    if len(text) <= SHOWN_CHARS:
        return text
    size = f"{len(name)} characters" if isinstance(name, str) else type(name).__name__
    return f"{text[:SHOWN_CHARS]}... ({size})"
