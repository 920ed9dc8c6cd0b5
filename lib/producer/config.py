"""The producer's settings: one frozen dataclass, checked once (``Producer(masters,
**settings)`` or ``config=ProducerConfig(...)``; docs/clients.md lists them)."""
from __future__ import annotations

from dataclasses import dataclass

from lib.errors import ConfigError
from lib.records import DEFAULT_MAX_BATCH_BYTES

# A batch passes batch_bytes by at most one message (1 MiB by default) and must stay within
# the broker's default max_batch_bytes (4 MiB).
MAX_BATCH_BYTES = DEFAULT_MAX_BATCH_BYTES // 2


@dataclass(frozen=True)
class ProducerConfig:
    """Every producer setting; ``Producer(masters, **settings)`` builds one."""

    linger_ms: int = 5  # how long a batch waits for more records before it is sent
    # A batch is sent once it holds this many frame bytes. 2 MiB batches cost a quarter less
    # CPU per 1 KiB record than 512 KiB ones, on both sides; a broker with a lower
    # max_batch_bytes gets them in pieces (lib/producer/split.py).
    batch_bytes: int = MAX_BATCH_BYTES
    buffer_bytes: int = 64 * 1024 * 1024  # bytes held (queued + in flight) before send() blocks
    max_block_ms: int = 60_000  # how long send() blocks on a full buffer before raising
    retries: int = 5  # retries of a batch on retriable errors
    retry_backoff_ms: int = 100  # first backoff; doubles per retry, at most 1 s
    request_timeout_ms: int = 30_000  # deadline of one Produce call and of master calls
    compression: str | None = None  # None or "zlib" (per record, only when it saves bytes)
    # The broker stores a retried batch once (ids from the active master; kept across broker
    # restarts). False: a retry after a lost answer may store a batch twice.
    idempotent: bool = True
    # "1": a send is acknowledged once the partition's leader stored it; "all": once every
    # in-sync replica did (refused with NotEnoughReplicas, and retried, while the ISR is
    # below the topic's min_insync_replicas). "" (the default): "1", but "all" for a
    # transactional producer, which needs it (as Kafka's): with "1" a leader failover can
    # cut an acknowledged record out of a transaction that then commits without it.
    acks: str = ""
    client_id: str = ""
    metadata_max_age_ms: int = 30_000  # routes are refreshed at least this often
    # Set: a transactional producer (begin/commit/abort, docs/transactions.md); a new
    # producer with the same id fences this one and aborts its open transaction.
    transactional_id: str = ""
    # How long a transaction may stay open before the coordinator aborts it (0: the
    # masters' transaction_timeout_ms, 60 s; at most their transaction_max_timeout_ms).
    transaction_timeout_ms: int = 0
    # Set: send_in_transaction() (RocketMQ's transactional messages, docs/transactions.md)
    # in this producer group; with Producer(..., check=fn) this producer also answers the
    # masters' check-backs of the group's half messages.
    producer_group: str = ""

    @property
    def acks_all(self) -> bool:
        """Whether sends wait for every in-sync replica (``acks`` resolved)."""
        return self.acks == "all" or (self.acks == "" and bool(self.transactional_id))

    def validate(self) -> None:
        limit = MAX_BATCH_BYTES
        checks = [
            (self.linger_ms >= 0, "linger_ms must be >= 0"),
            (0 < self.batch_bytes <= limit, f"batch_bytes must be in 1..{limit}"),
            (self.buffer_bytes >= self.batch_bytes, "buffer_bytes must be >= batch_bytes"),
            (self.max_block_ms >= 0, "max_block_ms must be >= 0"),
            (self.retries >= 0, "retries must be >= 0"),
            (self.retry_backoff_ms >= 0, "retry_backoff_ms must be >= 0"),
            (self.request_timeout_ms > 0, "request_timeout_ms must be > 0"),
            (self.compression in (None, "zlib"), "compression must be None or 'zlib'"),
            (self.acks in ("", "1", "all"), f"acks must be '1' or 'all', got {self.acks!r}"),
            (self.acks != "1" or not self.transactional_id,
             "a transactional producer needs acks='all' (with acks='1' a leader failover can "
             "cut an acknowledged record out of a committed transaction)"),
            (self.metadata_max_age_ms > 0, "metadata_max_age_ms must be > 0"),
            (self.idempotent or not self.transactional_id,
             "a transactional producer is idempotent: idempotent=False with a "
             "transactional_id"),
            (self.transaction_timeout_ms >= 0, "transaction_timeout_ms must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"producer config: {message}")
