"""Fields of a form or a JSON body, checked: each error is a 400 whose message starts with the
field's name, so the operator knows what to fix. ``data`` is a form (a MultiDict, whose
repeated fields :func:`values` reads whole) or a decoded JSON object."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lib.auth.credentials import MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS
from lib.errors import InvalidName
from lib.names import MAX_NAME_LEN, check_name
from portal_web.errors import PortalError

TRUE = frozenset({"1", "true", "on", "yes"})
FALSE = frozenset({"", "0", "false", "off", "no"})
SHOWN = 64  # an error quotes at most this much of what was sent


def bad(field: str, message: str) -> PortalError:
    return PortalError(400, "INVALID_ARGUMENT", f"{field} {message}")


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def text(data: Mapping[str, Any], field: str, *, required: bool = True,
         max_len: int = 200) -> str:
    """A printable string, spaces around it dropped; "" when absent and not ``required``."""
    raw = data.get(field)
    if raw is None:
        raw = ""
    if not isinstance(raw, str):
        raise bad(field, f"must be a string, got {type(raw).__name__}")
    value = raw.strip()
    if required and not value:
        raise bad(field, "is required")
    if len(value) > max_len:
        raise bad(field, f"must be at most {max_len} characters, got {len(value)}")
    if not value.isprintable():
        raise bad(field, "must be printable text (no control characters)")
    return value


def name(data: Mapping[str, Any], field: str, kind: str, *, required: bool = True) -> str:
    """A user, role, topic or group name (the cluster's one rule for names)."""
    value = text(data, field, required=required, max_len=MAX_NAME_LEN)
    return check_name_field(field, value, kind) if value else value


def check_name_field(field: str, value: str, kind: str) -> str:
    try:
        return check_name(value, kind)
    except InvalidName:
        raise bad(field, f"must be a valid {kind} name (letters, digits, '.', '_', '-'; not "
                         f"starting with '.', '_' or '-'; at most {MAX_NAME_LEN}), got "
                         f"{shown(value)}") from None


def choice(data: Mapping[str, Any], field: str, allowed: tuple[str, ...],
           default: str | None = None) -> str:
    """One of ``allowed``; ``default`` when absent or empty (required when None)."""
    value = data.get(field)
    if value is None or value == "":
        if default is None:
            raise bad(field, f"is required: one of {', '.join(allowed)}")
        return default
    if value not in allowed:
        raise bad(field, f"must be one of {', '.join(allowed)}, got {shown(value)}")
    return value


def flag(data: Mapping[str, Any], field: str) -> bool:
    """A checkbox (absent: off) or a JSON boolean."""
    value = data.get(field)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.lower() in TRUE | FALSE:
        return value.lower() in TRUE
    raise bad(field, f"must be true or false, got {shown(value)}")


def values(data: Mapping[str, Any], field: str) -> Any:
    """A repeated form field as a list ([] when absent), or the JSON value (None if absent)."""
    getlist = getattr(data, "getlist", None)
    return getlist(field) if getlist is not None else data.get(field)


def password(data: Mapping[str, Any], field: str = "password") -> str:
    """A new password: the policy's length, and ``password_again`` equal to it when sent (the
    forms send it). The value is never part of an error."""
    value = data.get(field)
    if not isinstance(value, str) or not value:
        raise bad(field, "is required")
    if not MIN_PASSWORD_CHARS <= len(value) <= MAX_PASSWORD_CHARS:
        raise bad(field, f"must be {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters, "
                         f"got {len(value)}")
    again = data.get(f"{field}_again")
    if again is not None and again != value:
        raise bad(f"{field}_again", f"does not match {field}: type the same password twice")
    return value
