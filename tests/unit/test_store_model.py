"""Stateful model test: storage.store.Store against a plain in-memory log per partition.

The model is ``partition -> list of (value, key, tag, timestamp)`` (offset n is item n) plus the
earliest offset per partition. Retention is the one thing the model cannot predict (it depends
on segment boundaries), so after ``enforce_retention`` the model adopts the store's earliest
offset, checking it only moves up, never passes latest, and that everything from it on still
matches the model.

The config is tiny so cache blocks swap, data segments roll and index segments roll within a
few steps; the short flush intervals let the background flusher move data from the cache to the
files between steps, so reads exercise both tiers. Background retention is kept out of the way
with a huge ``retention_check_interval_ms``: retention only happens when a rule asks for it.
"""
from __future__ import annotations

import random
import shutil
import tempfile
import threading

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from lib.errors import OffsetOutOfRange, UnknownPartition
from lib.records import (
    COLUMN_BYTES_PER_RECORD,
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
    Record,
    decode_frames,
    encode_batch,
)
from storage.config import StoreConfig
from storage.store import Store
from tests.helpers import batch_of

KiB = 1 << 10
CONFIG = StoreConfig(
    cache_block_bytes=16 * KiB,
    cache_block_messages=48,
    cache_flush_interval_ms=5,
    fsync_every_messages=64,
    fsync_every_bytes=24 * KiB,
    fsync_interval_ms=10,
    checkpoint_interval_ms=20,
    segment_bytes=16 * KiB,
    index_segment_entries=16,
    retention_bytes=40 * KiB,
    retention_check_interval_ms=10**12,  # never in the background: only enforce_retention
    max_message_bytes=4 * KiB,
    max_batch_bytes=8 * KiB,
)
TOPIC = "model"
STORE_ID = 7
FIRST_PARTITIONS = (0, 1, 3)
TAGS = (None, "a", "b", "ccc", "ü")
FILTERS = ("a", "b", "ccc", "ü", "zz")  # "zz" never occurs

Item = tuple[bytes, bytes | None, str | None, int]  # value, key, tag, timestamp


def _value(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


records_st = st.lists(
    st.tuples(
        st.builds(_value, st.one_of(st.integers(0, 48), st.integers(200, 3500)),
                  st.integers(0, 2**16)),
        st.one_of(st.none(), st.binary(max_size=8)),
        st.sampled_from(TAGS),
        st.integers(-5, 1000),
    ),
    min_size=1, max_size=12,
)
max_bytes_st = st.one_of(st.integers(1, 200), st.integers(200, 20_000), st.just(1 << 20))
filter_st = st.one_of(st.none(), st.lists(st.sampled_from(FILTERS), min_size=1, max_size=2,
                                          unique=True))


def _frame_bytes(item: Item) -> int:
    value, key, tag, _ts = item
    return FRAME_HEADER_SIZE + len(value) + len(key or b"") + len((tag or "").encode())


def batches_of(items: list[Item], limit: int) -> list[list[Item]]:
    """Split items into runs whose encoded batch stays within ``limit`` bytes."""
    out: list[list[Item]] = []
    size = limit + 1
    for item in items:
        need = COLUMN_BYTES_PER_RECORD + _frame_bytes(item)
        if size + need > limit:
            out.append([])
            size = HEADER_SIZE
        out[-1].append(item)
        size += need
    return out


def encode(items: list[Item]) -> bytes:
    return encode_batch([Record(v, key=k, tag=t, timestamp=ts) for v, k, t, ts in items])


def as_item(rec: Record) -> Item:
    return rec.value, rec.key, rec.tag, rec.timestamp


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="tubeq-model-")
        self.log: dict[int, list[Item]] = {p: [] for p in FIRST_PARTITIONS}
        self.earliest: dict[int, int] = dict.fromkeys(FIRST_PARTITIONS, 0)
        # A background thread (the flusher) that dies must fail the run, not just warn.
        self.thread_errors: list[BaseException | None] = []
        self._prev_hook = threading.excepthook
        threading.excepthook = self._on_thread_error
        self.store = self._open()

    def _on_thread_error(self, args: threading.ExceptHookArgs) -> None:
        self.thread_errors.append(args.exc_value)
        self._prev_hook(args)

    def _open(self) -> Store:
        return Store(self.dir, TOPIC, STORE_ID, sorted(self.log), CONFIG)

    def teardown(self) -> None:
        try:
            self.store.close()
            assert self.thread_errors == []
        finally:
            threading.excepthook = self._prev_hook
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers

    def _partition(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from(sorted(self.log)), label="partition")

    def _append(self, p: int, items: list[Item]) -> None:
        for batch in batches_of(items, CONFIG.max_batch_bytes):
            raw = encode(batch)
            assert len(raw) <= CONFIG.max_batch_bytes
            base = len(self.log[p])
            assert self.store.append(p, raw) == (base, base + len(batch) - 1)
            self.log[p] += batch

    def _adopt_earliest(self, p: int) -> int:
        """Take the store's earliest offset into the model: it may only move up."""
        got = self.store.earliest(p)
        assert self.earliest[p] <= got <= len(self.log[p]), (p, self.earliest[p], got)
        self.earliest[p] = got
        return got

    def _check_read(self, p: int, offset: int, max_bytes: int, tags: list[str] | None) -> int:
        model = self.log[p]
        flushed = self.store.stats()["partitions"][p]["flushed"]
        res = self.store.read(p, offset, max_bytes, tags=tags)
        event("read from " + ("file" if offset < flushed else "cache"))
        assert (res.earliest, res.latest) == (self.earliest[p], len(model))
        recs = decode_frames(res.frames, res.offsets, p)
        if offset == len(model):
            assert recs == [] and res.next_offset == offset
            return offset
        assert offset < res.next_offset <= len(model), "a read must make progress"
        examined = range(offset, res.next_offset)
        if tags is None:
            assert [r.offset for r in recs] == list(examined), "offsets must be dense"
        else:
            assert [r.offset for r in recs] == [o for o in examined if model[o][2] in tags]
        assert [as_item(r) for r in recs] == [model[r.offset] for r in recs]
        if len(recs) > 1:
            assert len(res.frames) <= max_bytes
        return res.next_offset

    def _check_everything(self, max_bytes: int = 1 << 20, tags: list[str] | None = None) -> None:
        """Follow next_offset from earliest to latest in every partition."""
        for p in sorted(self.log):
            offset = self.earliest[p]
            while offset < len(self.log[p]):
                offset = self._check_read(p, offset, max_bytes, tags)

    # -------------------------------------------------------------------- rules

    @initialize(sizes=st.lists(st.integers(0, 600), min_size=len(FIRST_PARTITIONS),
                               max_size=len(FIRST_PARTITIONS)),
                count=st.integers(0, 150), tag=st.sampled_from(TAGS))
    def preload(self, sizes: list[int], count: int, tag: str | None) -> None:
        """Start most runs with a few segments' worth of data so retention has work to do."""
        for p, size in zip(FIRST_PARTITIONS, sizes, strict=True):
            self._append(p, [(_value(size, i), None, tag if i % 3 else None, i % 500)
                             for i in range(count)])

    @rule(data=st.data(), items=records_st)
    def append(self, data: st.DataObject, items: list[Item]) -> None:
        self._append(self._partition(data), items)

    @rule(data=st.data(), n=st.integers(20, 300), size=st.integers(0, 700),
          tag=st.sampled_from(TAGS), ts=st.integers(0, 1000))
    def append_bulk(self, data: st.DataObject, n: int, size: int, tag: str | None,
                    ts: int) -> None:
        """Many same-shaped records: enough volume to roll blocks, segments and indexes."""
        items = [(_value(size, i), None, tag, ts + i % 7) for i in range(n)]
        self._append(self._partition(data), items)

    @rule(data=st.data(), max_bytes=max_bytes_st, tags=filter_st)
    def read(self, data: st.DataObject, max_bytes: int, tags: list[str] | None) -> None:
        p = self._partition(data)
        lo, hi = self._adopt_earliest(p), len(self.log[p])
        # Draw with fixed bounds: ``lo`` comes from the store (retention depends on flush
        # timing), and draws that depend on it would make Hypothesis' replay inconsistent.
        where = data.draw(st.sampled_from(["earliest", "latest", "last", "any"]), label="where")
        k = data.draw(st.integers(0, 1 << 20), label="k")
        offset = {"earliest": lo, "latest": hi, "last": max(lo, hi - 1),
                  "any": lo + k % (hi - lo + 1)}[where]
        self._check_read(p, offset, max_bytes, tags)

    @rule(data=st.data(), below=st.integers(1, 10**6), above=st.integers(1, 10**6))
    def read_out_of_range(self, data: st.DataObject, below: int, above: int) -> None:
        p = self._partition(data)
        lo, hi = self._adopt_earliest(p), len(self.log[p])
        offset = data.draw(st.sampled_from([lo - below, hi + above, -1]), label="offset")
        with pytest.raises(OffsetOutOfRange) as err:
            self.store.read(p, offset)
        assert (err.value.earliest, err.value.latest) == (lo, hi)
        assert err.value.offset == offset

    @rule(p=st.integers(20, 30))
    def read_unknown_partition(self, p: int) -> None:
        with pytest.raises(UnknownPartition):
            self.store.read(p, 0)

    @rule(data=st.data(), ts=st.integers(-10, 1010))
    def offset_for_time(self, data: st.DataObject, ts: int) -> None:
        p = self._partition(data)
        lo, model = self._adopt_earliest(p), self.log[p]
        expected = next((o for o in range(lo, len(model)) if model[o][3] >= ts), len(model))
        assert self.store.offset_for_time(p, ts) == expected

    @rule()
    def flush(self) -> None:
        self.store.flush()
        for p in self.log:
            stats = self.store.stats()["partitions"][p]
            assert stats["flushed"] == stats["latest"] == len(self.log[p])

    @rule(flush_first=st.booleans())
    def close_and_reopen(self, flush_first: bool) -> None:
        if flush_first:
            self.store.flush()
        self.store.close()
        self.store = self._open()
        for p, model in self.log.items():
            assert self.store.latest(p) == len(model), "nothing that was synced may be lost"
            assert self.store.earliest(p) == self.earliest[p], "reopen must not move earliest"
        self._check_everything()

    @rule()
    def enforce_retention(self) -> None:
        self.store.flush()  # nothing left to write, so the sizes below are stable
        before = dict(self.earliest)
        doomed = self.store.enforce_retention()
        for p in self.log:
            self._adopt_earliest(p)
        event(f"retention deleted {min(doomed, 3)}{'+' if doomed >= 3 else ''} segments")
        if not doomed:
            assert self.earliest == before
        elif any(self.earliest[p] > before[p] for p in self.log):
            event("retention moved earliest")
        stats = self.store.stats()
        assert stats["data_bytes"] <= CONFIG.retention_bytes or stats["segments"] == 1
        self._check_everything()

    @precondition(lambda self: len(self.log) < 6)
    @rule(data=st.data())
    def add_partition(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from([q for q in range(13) if q not in self.log]), label="new")
        self.store.add_partition(p)
        self.log[p], self.earliest[p] = [], 0
        assert (self.store.earliest(p), self.store.latest(p)) == (0, 0)
        assert self.store.partitions == sorted(self.log)

    @rule(data=st.data())
    def add_existing_partition_is_a_no_op(self, data: st.DataObject) -> None:
        p = self._partition(data)
        self.store.add_partition(p)
        assert self.store.latest(p) == len(self.log[p])

    @rule(max_bytes=max_bytes_st, tags=filter_st)
    def read_everything(self, max_bytes: int, tags: list[str] | None) -> None:
        self._check_everything(max_bytes, tags)

    # --------------------------------------------------------------- invariants

    @invariant()
    def offsets_and_bounds(self) -> None:
        event(f"data segments: {min(self.store.stats()['segments'], 4)}")
        assert self.thread_errors == [], "a store thread died"
        assert self.store.partitions == sorted(self.log)
        for p, model in self.log.items():
            assert self.store.latest(p) == len(model)
            assert self.earliest[p] <= self.store.earliest(p) <= len(model)


StoreModel.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_store_model = StoreModel.TestCase


def test_add_partition_while_flusher_checkpoints_does_not_kill_it(tmp_path, monkeypatch):
    """Regression: the flusher iterated ``Store._parts`` outside the lock in
    ``_maybe_checkpoint`` (and ``_apply_retention``) while ``add_partition`` inserted into it;
    "dictionary changed size during iteration" killed the flusher silently, after which
    ``flush()`` blocked forever and ``close()`` dropped whatever was still cached."""
    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    cfg = StoreConfig(checkpoint_interval_ms=1, cache_flush_interval_ms=1, fsync_interval_ms=1)
    store = Store(tmp_path, "t", 0, range(50), cfg)
    for p in range(50):
        store.append(p, batch_of([b"x"]))  # every index has a file, so each sync() fsyncs
    store.flush()
    for p in range(50, 1000):
        store.add_partition(p)  # races with the flusher's checkpoint loop
        if errors:
            break
    store.append(0, batch_of([b"y"]))
    flusher = threading.Thread(target=store.flush, daemon=True)
    flusher.start()
    flusher.join(10)
    assert errors == [] and not flusher.is_alive(), f"flusher died: {errors[:1]}"
    store.close()
    with Store(tmp_path, "t", 0, [0], cfg) as again:
        assert again.latest(0) == 2
