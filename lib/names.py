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


MAX_INSTANCE_ID_LEN = 64
INSTANCE_SEP = "@"  # group@instance: a broadcast instance's offsets (never in a checked name)


def check_instance_id(instance_id: object) -> str:
    """Return ``instance_id`` if it is a valid broadcast instance id (the name rule, at most
    :data:`MAX_INSTANCE_ID_LEN` characters), else raise :class:`InvalidName`."""
    name = check_name(instance_id, "instance id")
    if len(name) > MAX_INSTANCE_ID_LEN:
        raise InvalidName(f"instance id {_shown(name)} is longer than {MAX_INSTANCE_ID_LEN} "
                          "characters", name=_shown(name), kind="instance id")
    return name


def offsets_owner(group: str, instance_id: str = "") -> str:
    """Whose offsets a commit or fetch is about: the group's, or ``group@instance`` for a
    broadcast instance (docs/broadcast.md). Both parts are checked."""
    check_name(group, "group")
    return f"{group}{INSTANCE_SEP}{check_instance_id(instance_id)}" if instance_id else group


def check_owner(owner: object) -> str:
    """Return ``owner`` if it is ``group`` or ``group@instance`` (both valid), else raise."""
    if isinstance(owner, str) and INSTANCE_SEP in owner:
        group, instance = owner.split(INSTANCE_SEP, 1)
        return offsets_owner(group, instance)
    return check_name(owner, "group")
