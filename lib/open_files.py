"""The open-file limit a broker needs: every segment of every store's data log and index is
an open descriptor, so a broker of 10,000 topics holds 20,000 and more (two per topic and one
per further segment, plus sockets), past the 1,024 or 20,000 many systems start processes
with.

Raises ``RLIMIT_NOFILE`` toward what the broker is configured to want: the soft limit up to
the hard one is always allowed; past the hard limit only with the privilege for it (root,
``CAP_SYS_RESOURCE``; never past ``fs.nr_open``). What it got is logged, with a warning when
it is less, so that running out is never a surprise (docs/operations.md says what a topic
costs).
"""
from __future__ import annotations

import resource

INFINITY = resource.RLIM_INFINITY


def raise_open_files(want: int) -> tuple[int, int]:
    """(soft limit now in force, the one before)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == INFINITY or soft >= want:
        return soft, soft
    if hard != INFINITY and want > hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return want, soft
        except (ValueError, OSError):  # not privileged: as far as the hard limit
            pass
    target = want if hard == INFINITY else min(want, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target, soft
