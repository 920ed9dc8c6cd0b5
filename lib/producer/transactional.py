"""The producer's transactional API (mixed into :class:`lib.producer.producer.Producer`):
Kafka's transactions (``begin``, ``commit``, ``abort``, ``send_offsets``, ``transaction()``;
state and coordinator calls in lib/producer/transaction.py) and RocketMQ's transactional
messages (``send_in_transaction``; lib/producer/half.py). docs/transactions.md says which to
pick. A producer without a ``transactional_id`` (or ``producer_group``) refuses these calls
with InvalidTxnState naming the setting.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from lib.auth.client import Credentials
from lib.errors import (
    ClientClosed,
    InvalidArgument,
    InvalidTxnState,
    TubeqError,
)
from lib.names import check_name
from lib.producer.half import HalfMessage, TxnSendResult
from lib.producer.transaction import ABORTABLE, FENCED, Transactions
from lib.tls import Tls
from lib.types import GroupMetadata, TopicPartition


class TransactionalApi:
    """What a producer adds for transactions; uses the producer's ``_txn`` (Transactions or
    None), ``_half`` (HalfMessages or None), ``flush``, ``_sender``, ``_pool``, ``_master``,
    ``_routes``, ``config`` and ``_closed``."""

    def begin(self) -> None:
        """Open a transaction: the records sent until :meth:`commit` are stored atomically,
        across any partitions of any topics (a ``transactional_id`` producer only).
        InvalidTxnState when one is open already; ProducerFenced once fenced."""
        self._transactional("begin").begin()

    def commit(self, timeout: float | None = None) -> None:
        """Send every record of the transaction, then commit it: read_committed consumers
        see all of its records or none. InvalidTxnState when a send of it failed (only
        :meth:`abort` can end it then) or none is open; ProducerFenced when a newer instance
        took the transactional_id (close this one); Unavailable / RequestTimedOut when the
        coordinator could not be reached: calling commit() again is safe."""
        txn = self._ending("commit", True, timeout)
        txn.check_commit()
        try:
            txn.sync(self._offset_client().per_broker, self.config.request_timeout_ms / 1000)
        except TubeqError as exc:
            if not exc.retriable:  # records lost, fenced...: it can only be aborted now
                txn.failed(exc)
            txn.end_failed()  # a broker not answering: commit() may be tried again
            raise
        self._end(txn, True)

    def abort(self, timeout: float | None = None) -> None:
        """Abort the open transaction: none of its records is ever delivered to a
        read_committed consumer. Records still queued are sent first (their sequence
        numbers are taken), then the abort markers are written."""
        self._end(self._ending("abort", False, timeout), False)

    def send_offsets(self, offsets: Mapping[TopicPartition, int],
                     group: str | GroupMetadata) -> None:
        """Commit a consumer group's offsets as part of the open transaction
        (consume-transform-produce): they count once the transaction commits, never if it
        aborts. ``offsets``: the next offset to read per input partition (the position
        after the last record processed); ``group``: the consumer's ``group_metadata()``
        (its member and generation fence a consumer that lost the partitions in a rebalance:
        ``Fenced``) or a group name (no fencing, as a manual assignment). Until the
        transaction ends, the group's offsets of those partitions answer
        ``UnstableOffsetCommit`` to a consumer that fetches them (it retries). A failure
        makes the transaction abortable, as a failed send does."""
        txn = self._transactional("send_offsets")
        txn.check_send()
        meta = group if isinstance(group, GroupMetadata) else GroupMetadata(group)
        check_name(meta.group, "group")
        rows = {TopicPartition(*tp): off for tp, off in offsets.items()}
        for tp, off in rows.items():
            check_name(tp.topic)
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise InvalidArgument(f"cannot commit offset {off!r} for {tp}: offsets are "
                                      "integers >= 0")
        if not rows:
            return
        try:
            txn.add_offsets(meta.group, rows)
            self._offset_client().commit(meta.group, rows, (meta.member_id, meta.generation),
                                         producer=(txn.producer_id, txn.epoch))
        except TubeqError as exc:
            txn.failed(exc)
            raise

    def _offset_client(self) -> Any:
        """The consumers' offset calls (lib/consumer/coordinator.py), made when first used:
        a producer that never sends offsets does not import the consumers."""
        if self._offsets is None:
            from lib.consumer.coordinator import OffsetClient
            self._offsets = OffsetClient(self._pool, self._master, self._routes,
                                         self.config.request_timeout_ms / 1000)
        return self._offsets

    def send_in_transaction(self, topic: str, value: bytes, *,
                            local: Callable[[HalfMessage, Any], Any],
                            key: bytes | None = None,
                            headers: Mapping[str, bytes] | None = None,
                            partition: int | None = None, arg: Any = None) -> TxnSendResult:
        """RocketMQ's transactional message: store ``value`` as a half message (invisible
        to read_committed consumers), run ``local(message, arg)``, and commit or roll it
        back by its answer ("commit", "rollback"; "unknown" or an exception: the masters
        check back with a producer of the group later). Needs a ``producer_group``; blocks
        for the local transaction. See lib/producer/half.py and docs/transactions.md."""
        if self._closed:
            raise ClientClosed("the producer is closed")
        if self._half is None:
            raise InvalidTxnState("send_in_transaction(): this producer has no "
                                  "producer_group (Producer(..., producer_group=...))")
        check_name(topic)
        if not isinstance(value, (bytes, bytearray)) or (
                key is not None and not isinstance(key, (bytes, bytearray))):
            raise InvalidArgument("value and key must be bytes")
        return self._half.send(topic, bytes(value), local, key, headers, partition, arg)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """``with producer.transaction():`` begins, commits when the block ends, aborts
        when it raises (and lets the exception go on)."""
        self.begin()
        try:
            yield self
        except BaseException:
            if self._txn.state != FENCED:
                self.abort()
            raise
        try:
            self.commit()
        except TubeqError:
            if self._txn.state == ABORTABLE:  # a send or a partition lost records: undo
                self.abort()
            raise

    def _ending(self, call: str, commit: bool, timeout: float | None) -> Transactions:
        """The transaction, its end begun (sends refused) and its records sent; a flush
        that fails leaves it as it was, to end again."""
        txn = self._transactional(call)
        txn.start_end(commit)
        try:
            self.flush(timeout)
        except BaseException:
            txn.end_failed()
            raise
        return txn

    def _end(self, txn: Transactions, commit: bool) -> None:
        txn.end(commit)
        self._sender.sequences.reset(txn.producer_id, txn.epoch)

    def _transactional(self, call: str) -> Transactions:
        if self._txn is None:
            raise InvalidTxnState(f"{call}(): this producer has no transactional_id "
                                  "(Producer(..., transactional_id=...))")
        if self._closed:
            raise ClientClosed("the producer is closed")
        return self._txn

    @property
    def transactional_id(self) -> str:
        return "" if self._txn is None else self._txn.transactional_id


def reader_for(masters: str | Sequence[str], credentials: Credentials | None, tls: Tls | None,
            timeout_s: float) -> Any:
    """A MessageReader for the half-message checker (imported when first needed)."""
    from lib.consumer.reader import MessageReader
    return MessageReader(masters, credentials=credentials, tls=tls, rpc_timeout_s=timeout_s)
