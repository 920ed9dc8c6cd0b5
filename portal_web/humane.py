"""Figures as an operator reads them: durations ("7 days"), times past ("0.4 s ago"), sizes
("1.5 MiB") and counts ("12,345"). Pure functions, registered as Jinja filters by the app;
the pages keep the exact figure in a tooltip (``title``) and the JSON API keeps machine
figures only (ms, bytes), so nothing here is ever parsed back.

A limit of -1 (or 0) is "no limit" wherever the cluster uses it (retention by age and size).
"""
from __future__ import annotations

import time

_SIZE_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")
_STEPS = (("day", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))


def duration(ms: int | float) -> str:
    """``ms`` in its largest unit and at most one more: 250 ms, 2.5 s, 45 s, 5 min 30 s,
    3 h, 1 day 12 h, 7 days. Negative: "-" (not known)."""
    if ms < 0:
        return "-"
    if ms < 1000:
        return f"{int(ms)} ms"
    if ms < 10_000:
        return f"{ms / 1000:.1f} s".replace(".0 s", " s")
    ms = int(round(ms / 1000) * 1000)  # whole seconds from here on
    parts = []
    for name, size in _STEPS:
        if ms >= size:
            value, ms = divmod(ms, size)
            parts.append(_unit(value, name))
        elif parts:
            break  # "1 h 5 s" is not what one says: units follow each other
        if len(parts) == 2:
            break
    return " ".join(parts)


def _unit(value: int, name: str) -> str:
    return f"{value} {name}{'s' if name == 'day' and value != 1 else ''}"


def ago(when_ms: int, now_ms: float | None = None) -> str:
    """How long ago ``when_ms`` (ms since the epoch) was: "0.4 s ago", "3 min ago"; "never"
    for 0 or less (nothing yet), "just now" for a time a little ahead (clocks differ)."""
    if when_ms <= 0:
        return "never"
    now = time.time() * 1000 if now_ms is None else now_ms
    delta = now - when_ms
    if delta < 0:
        return "just now"
    if delta < 1000:
        return f"{delta / 1000:.1f} s ago"
    return f"{duration(delta)} ago"


def size(nbytes: int | float) -> str:
    """Bytes in binary units, three figures at most: 512 B, 1.5 KiB, 12 KiB, 100 MiB.
    Negative: "?" (not reported)."""
    if nbytes < 0:
        return "?"
    if nbytes < 1024:
        return f"{int(nbytes)} B"
    value = float(nbytes)
    for unit in _SIZE_UNITS:
        value /= 1024
        if value < 1024 or unit == _SIZE_UNITS[-1]:
            shown = f"{value:.1f}" if value < 10 else f"{value:.0f}"
            if shown == "1024":  # 1023.9 KiB rounds up: one of the next unit
                continue
            return f"{shown} {unit}"
    return f"{value:.0f} {_SIZE_UNITS[-1]}"


def retention(ms: int, nbytes: int) -> str:
    """A topic's retention: "7 days, no size limit", "1 day or 10 GiB", "no limit"."""
    if ms <= 0 and nbytes <= 0:
        return "no limit"
    if nbytes <= 0:
        return f"{duration(ms)}, no size limit"
    if ms <= 0:
        return f"{size(nbytes)}, no time limit"
    return f"{duration(ms)} or {size(nbytes)}, whichever comes first"


def count(n: int) -> str:
    """A count with thousands separators: 12,345 ("?" when not known: negative)."""
    return "?" if n < 0 else f"{n:,}"


FILTERS = {"duration": duration, "ago": ago, "size": size, "retention": retention,
           "count": count}
