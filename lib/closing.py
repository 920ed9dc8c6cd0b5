"""``Closeable``: a client or store used in a ``with`` block is closed when the block ends,
however it ends. One mixin instead of the same two methods on every class with a ``close()``."""
from __future__ import annotations

from typing import Self


class Closeable:
    """Subclasses define ``close()``; ``with obj:`` returns ``obj`` and closes it on exit."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
