"""How the message browser shows bytes (keys, values, header values): pretty JSON, text, or a
hex dump. Pure functions over bytes; the templates escape what they return (autoescape), so
nothing here needs to, and nothing here marks anything safe."""
from __future__ import annotations

import json
import re
from typing import Any

FORMATS = ("auto", "text", "json", "hex")
PREVIEW_BYTES = 4096  # of a value; keys and header values show less (see shown())
MAX_JSON_BYTES = 1 << 20  # larger values are not parsed as JSON (text or hex instead)
# C0 and C1 control characters and DEL, except tab, newline and carriage return.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def shown(data: bytes | None, fmt: str = "auto", limit: int = PREVIEW_BYTES) -> dict[str, Any]:
    """How ``data`` is shown in ``fmt`` (one of :data:`FORMATS`), as a plain dict:
    ``format`` (json, text, hex, or none for a missing key), ``text`` (at most about
    ``limit`` bytes' worth), ``size`` in bytes, ``truncated``, and a ``note`` when the format
    asked for does not fit the bytes (then the auto choice is shown).

    auto: pretty JSON for a JSON object or array, else text when the bytes are printable
    UTF-8, else hex. json: any JSON value. text: UTF-8, undecodable bytes as U+FFFD."""
    if data is None:
        return {"format": "none", "text": "", "size": 0, "truncated": False, "note": ""}
    text = _utf8(data)
    if fmt == "hex":
        return _cut("hex", data, limit, len(data))
    if fmt == "text":
        if text is None:
            return _cut("text", data.decode("utf-8", "replace"), limit, len(data),
                        "not UTF-8: undecodable bytes shown as \ufffd")
        return _cut("text", text, limit, len(data))
    note = "not JSON" if fmt == "json" else ""
    if text is not None:
        pretty = _json(text, data, structured_only=fmt != "json")
        if pretty is not None:
            return _cut("json", pretty, limit, len(data))
        if not _CONTROL.search(text):
            return _cut("text", text, limit, len(data), note)
    return _cut("hex", data, limit, len(data), note)


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _json(text: str, data: bytes, structured_only: bool) -> str | None:
    """``text`` pretty-printed if it is JSON (only an object or array with
    ``structured_only``), else None."""
    if len(data) > MAX_JSON_BYTES or (structured_only and not text.lstrip().startswith(("{",
                                                                                         "["))):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # ValueError: bad JSON, or an int of 4300+ digits
        return None
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    except (ValueError, RecursionError):
        return None


def _cut(kind: str, what: str | bytes, limit: int, size: int, note: str = "") -> dict[str, Any]:
    if isinstance(what, bytes):
        text, truncated = hexdump(what[:limit]), len(what) > limit
    else:
        text, truncated = what[:limit], len(what) > limit
    return {"format": kind, "text": text, "size": size, "truncated": truncated, "note": note}


def hexdump(data: bytes) -> str:
    """Lines of 16 bytes: offset, hex bytes, and the printable ASCII ones (``.`` for others)."""
    lines = []
    for at in range(0, len(data), 16):
        row = data[at:at + 16]
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{at:08x}  {row.hex(' '):<47}  |{ascii_}|")
    return "\n".join(lines)
