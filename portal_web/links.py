"""Where the portal may send a browser back to: a path on this site, checked as a browser
will read it. Pure functions, no Flask.

A browser reading a ``Location`` drops tabs and newlines from it, takes a backslash for a
slash, and treats ``//host`` as another site (WHATWG URL standard), so ``/<TAB>/evil.example``
would leave the site although it starts with one slash. Rather than undo each trick, only a
plain path is taken: printable ASCII from RFC 3986's path and query characters, starting with
exactly one ``/``, and the same still holds once percent-escapes are decoded (``/%2F/host``,
``/%5Chost``). Anything else goes to the dashboard.
"""
from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

HOME = "/"
MAX_PATH_CHARS = 2000
# RFC 3986 pchar, '/', '?' and '%' (escapes): no space, no control character, no backslash,
# no '#' (a fragment is never needed to come back).
_PLAIN = re.compile(r"/[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*")


def same_site_path(target: str | None) -> str | None:
    """``target`` if it is a plain path on this site (see the module docstring), else None."""
    if not target or len(target) > MAX_PATH_CHARS or not _PLAIN.fullmatch(target):
        return None
    seen = target
    for _ in range(3):  # escapes of escapes (%252F) are decoded as far as a server might
        if seen.startswith(("//", "/\\")) or "\\" in seen or \
                any(ord(c) < 0x20 or ord(c) == 0x7f for c in seen):
            return None
        decoded = unquote(seen)
        if decoded == seen:
            break
        seen = decoded
    else:
        return None  # still escaped after three rounds: no path of ours looks like that
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return None
    return target


def local_or_home(target: str | None) -> str:
    """``target`` when it is a same-site path, else the dashboard: where a login goes next."""
    return same_site_path(target) or HOME


def back_link(referrer: str | None, host: str, here: str = "") -> str:
    """The page a browser came from (its Referer) when that was another page of this site
    (``host``, as the request names it; ``here``, the failed page's path), else the
    dashboard: the error page's Back link."""
    if not referrer:
        return HOME
    parts = urlsplit(referrer)
    if parts.netloc != host or parts.scheme not in ("http", "https"):
        return HOME
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    return HOME if path == here else local_or_home(path)
