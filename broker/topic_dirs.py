"""The broker's topics on disk: ``<data_dir>/topics/<topic>/<store>``.

Each topic's directory belongs to one incarnation of the topic (its ``topic_id``, written in
``topic.json``): :meth:`TopicDirs.claim` erases an older incarnation's data before a new one
uses the directory, :meth:`TopicDirs.erase` drops one incarnation's data when the master says it
was deleted. :meth:`TopicDirs.open_store` opens (recovers) one store, with the copies it still
holds that the master no longer places here, and runs the checks registered with
:meth:`TopicDirs.on_store_opened` before it serves anything. :meth:`TopicDirs.remove` removes
copies, and closes and deletes stores left with none.

It keeps no table of topics: broker/topics.py decides what is opened, claimed, removed or
erased, and calls these under its own locks (see there for which work runs outside the table's
lock). The stores share one free-space guard and one checkpoint file, both owned here.
"""
from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lib.logs import event
from lib.names import check_name
from storage.checkpoints import CHECKPOINTS, CheckpointFile
from storage.config import StoreConfig
from storage.flusher_pool import DEFAULT_THREADS, FlusherPool
from storage.fsutil import atomic_write, inside
from storage.removal import partition_dirs
from storage.space import SpaceGuard
from storage.store import Store

log = logging.getLogger(__name__)
TOPIC_FILE = "topic.json"


@dataclass(frozen=True)
class Leaving:
    """Copies one store holds that the master no longer places here, to remove after the
    table changed; ``whole``: the store holds nothing else, close it and delete its dir."""

    topic: str
    topic_id: int
    store: Store
    partitions: tuple[int, ...]
    whole: bool


class TopicDirs:
    """Opens, claims, removes and erases what lives under ``<data_dir>/topics``."""

    def __init__(self, data_dir: str | Path, defaults: StoreConfig,
                 flusher_threads: int = DEFAULT_THREADS) -> None:
        self.root = Path(data_dir) / "topics"
        self.root.mkdir(parents=True, exist_ok=True)
        # One free-space guard for every store: they share the data dir's filesystem.
        self.space = SpaceGuard(self.root, defaults.disk_reserve_bytes,
                                max_unwritten=defaults.max_unwritten_bytes,
                                unwritten_wait_s=defaults.unwritten_wait_ms / 1e3)
        # One checkpoint file for every store, written at most once per interval
        # (storage/checkpoints.py: not a file rewrite per busy store per interval).
        self.checkpoints = CheckpointFile(
            Path(data_dir) / CHECKPOINTS, defaults.checkpoint_interval_ms / 1e3,
            page_cache_shared_bytes=defaults.page_cache_shared_bytes)
        self._on_open: list[Callable[[str, Store], None]] = []
        # A few threads write every store's blocks (storage/flusher_pool.py): not one each.
        self.flushers = FlusherPool(flusher_threads)

    def on_store_opened(self, check: Callable[[str, Store], None]) -> None:
        """Call ``check(topic, store)`` for every store opened (recovered) from now on,
        before it serves anything."""
        self._on_open.append(check)

    def claim(self, name: str, topic_id: int) -> bool:
        """Make ``<root>/<topic>`` belong to ``topic_id``; True when an older incarnation's
        data was there and is erased."""
        d = inside(self.root, name)
        old = _read_topic_id(d) if d.is_dir() else None
        stale = d.is_dir() and old is not None and old != topic_id
        if stale:
            shutil.rmtree(d)
            self.checkpoints.drop_topic(name, old)
            event(log, "topic.stale_data_dropped", topic=name, old_id=old, topic_id=topic_id)
        d.mkdir(parents=True, exist_ok=True)
        if old != topic_id:
            atomic_write(d / TOPIC_FILE, json.dumps({"topic": name, "topic_id": topic_id}).encode())
        return stale

    def erase(self, name: str, topic_id: int) -> bool:
        """Delete the data of one incarnation of a topic (only when its topic_id matches, or
        the directory names none); True when there was some. Its stores must be closed."""
        try:
            d = inside(self.root, check_name(name))
        except Exception:  # noqa: BLE001 - a bad name from the master has no directory
            return False
        if not d.is_dir() or _read_topic_id(d) not in (topic_id, None):
            return False
        shutil.rmtree(d, ignore_errors=True)
        self.checkpoints.drop_topic(name, topic_id)
        event(log, "topic.deleted", topic=name, topic_id=topic_id)
        return True

    def open_store(self, name: str, topic_id: int, store_id: int, partitions: list[int],
                   stores: int, config: StoreConfig) -> Store:
        """Open store ``store_id`` (of ``stores``) of a topic hosting ``partitions`` here.

        Copies of its partitions not placed here were removed while the broker was down: the
        store opens them too, and they leave it as any copy does (:meth:`remove`)."""
        d = inside(self.root, name, str(store_id))
        parts = list(partitions)
        parts += [q for q in partition_dirs(d) if q % stores == store_id and q not in partitions]
        slot = self.checkpoints.slot(name, topic_id, store_id, d)
        opened = Store(self.root, name, store_id, parts, config, self.space, checkpoint=slot,
                       pool=self.flushers)
        for check in self._on_open:
            check(name, opened)
        return opened

    def remove(self, leaving: list[Leaving]) -> list[tuple[str, int]]:
        """Remove the copies queued in ``leaving`` (outside the table's lock); returns those
        removed. A failed removal is logged, and the next apply, or the store's next open,
        repeats it."""
        removed = []
        for job in leaving:
            for p in job.partitions:
                try:
                    job.store.remove_partition(p)
                except Exception as exc:  # noqa: BLE001 - the other copies still go
                    event(log, "partition.remove_failed", logging.ERROR, topic=job.topic,
                          partition=p, error=repr(exc))
                    continue
                removed.append((job.topic, p))
                event(log, "partition.removed", topic=job.topic, partition=p)
            if job.whole:
                self._delete_store(job)
        return removed

    def _delete_store(self, job: Leaving) -> None:
        """Close a store that holds no partition and delete its directory. Each copy in it
        was removed durably first: whatever a crash leaves of the rest holds none."""
        store = job.store
        try:
            store.close()
        except Exception as exc:  # noqa: BLE001 - its files go anyway
            event(log, "store.close_failed", logging.ERROR, topic=job.topic, error=repr(exc))
        shutil.rmtree(store.dir, ignore_errors=True)
        self.checkpoints.drop_store(job.topic, job.topic_id, store.store_id)
        event(log, "store.removed", topic=job.topic, store=store.store_id)

    def close(self) -> None:
        """Write the last checkpoints and stop the flushers: after every store closed
        (theirs go in too)."""
        self.checkpoints.close()
        self.flushers.stop()


def _read_topic_id(d: Path) -> int | None:
    """The topic_id a topic directory belongs to (None: no readable ``topic.json``)."""
    try:
        return int(json.loads((d / TOPIC_FILE).read_text())["topic_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
