"""The options of ``format("tubeq")``: parsed and checked once, on the driver, into frozen data.

Spark hands a data source its options as a case-insensitive map of strings. Everything that can
be wrong with them without asking the cluster (a missing ``masters``, JSON that does not parse,
two ways of choosing topics at once) is found here, before any task starts, and reported as an
:class:`OptionError` naming the option: a user sees that instead of a worker's stack trace. What
needs the cluster (does the topic exist? is offset 5 still there?) is checked by ``plan``.

Names follow Spark's Kafka source where one exists (``subscribe``, ``subscribePattern``,
``assign``, ``startingOffsets``, ``startingTimestamp``, ``startingOffsetsByTimestamp``,
``endingOffsets``, ``minPartitions``, ``includeHeaders``, ``failOnDataLoss``); offsets in JSON
use Kafka's -2 for earliest and -1 for latest; timestamps are epoch milliseconds.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lib.auth.client import Credentials
from lib.errors import InvalidArgument
from lib.names import check_name
from lib.producer.producer import MAX_BATCH_BYTES
from lib.tls import Tls

EARLIEST, LATEST = -2, -1

# Either "earliest", "latest", or topic -> partition -> offset (offsets may be -2 / -1).
OffsetSpec = str | dict[str, dict[int, int]]

# How to reach and log in to the cluster: every read and write takes them (spark_sink/options
# Connection). Spark's spark.redaction.regex (default: secret|password|token|...) hides the
# values of "password" and "token" in its UI and logs.
CONNECTION_OPTIONS = {"masters", "user", "password", "token", "credentialsfile", "tlsca",
                      "tlscert", "tlskey", "requesttimeoutms"}
# Each client's own name and unit for requestTimeoutMs (unit: how many ms make one).
_TIMEOUT_ARGS = {"admin": ("timeout", 1000), "consumer": ("rpc_timeout_s", 1000),
                 "producer": ("request_timeout_ms", 1), "sink": ("request_timeout_s", 1000)}
READ_OPTIONS = CONNECTION_OPTIONS | {"subscribe", "subscribepattern", "assign", "startingoffsets",
                "endingoffsets", "minpartitions", "tags", "includeheaders", "failondataloss",
                "polltimeoutms", "maxoffsetspertrigger", "startingtimestamp",
                "startingoffsetsbytimestamp", "groupid", "isolationlevel"}
WRITE_OPTIONS = CONNECTION_OPTIONS | {"topic", "idempotent", "lingerms", "batchbytes", "sinkid",
                 "checkpointlocation"}
# Kafka options that mean nothing here; refusing them beats silently ignoring them.
NOT_SUPPORTED = {"kafka.bootstrap.servers": "masters", "kafka.group.id": "groupId",
                 "kafka.isolation.level": "isolationLevel",
                 "endingtimestamp": None, "endingoffsetsbytimestamp": None}
# The ways to choose where a read starts: at most one of them (Kafka ranks them instead; a
# silent ranking hides a forgotten option).
STARTS = {"startingoffsets": "startingOffsets", "startingtimestamp": "startingTimestamp",
          "startingoffsetsbytimestamp": "startingOffsetsByTimestamp"}


class OptionError(InvalidArgument):
    """An option of ``format("tubeq")`` is missing or wrong; ``option`` names it."""

    code = "INVALID_OPTION"

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"tubeq option {option!r}: {problem}", option=option)


@dataclass(frozen=True)
class Connection:
    """Where the cluster is and how to log in, from the options; pickled into every task and
    a key of the worker's client cache. Without credential options, the clients read the
    environment as every tubeq client does (TUBEQ_USER / TUBEQ_API_KEY / TUBEQ_CREDENTIALS_FILE
    / ~/.config/tubeq/credentials; TUBEQ_TLS_*). Secrets never show in a repr."""

    masters: str
    user: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    credentials_file: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    request_timeout_ms: int | None = None  # None: each client's own default

    def credentials(self) -> Credentials | None:
        """The options' credentials (None: the environment's)."""
        if self.credentials_file:
            return Credentials.from_file(self.credentials_file)
        if self.user:
            return Credentials(self.user, self.password)
        if self.token:
            return Credentials(token=self.token)
        return None

    def tls(self) -> Tls | None:
        """The options' TLS (None: the environment's, if any)."""
        if not (self.tls_ca or self.tls_cert):
            return None
        return Tls(self.tls_ca or None, self.tls_cert or None, self.tls_key or None)

    def clients(self, kind: str) -> dict[str, Any]:
        """The keyword arguments a tubeq client of this ``kind`` (admin, consumer, producer,
        sink) takes for these: the login, TLS and, if given, the request timeout."""
        args: dict[str, Any] = {"credentials": self.credentials(), "tls": self.tls()}
        if self.request_timeout_ms is not None:
            name, unit = _TIMEOUT_ARGS[kind]
            args[name] = self.request_timeout_ms / unit if unit > 1 else self.request_timeout_ms
        return args


@dataclass(frozen=True)
class ReadOptions:
    """A batch read: which topics or partitions, which offsets, which tags."""

    conn: Connection
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting_offsets: OffsetSpec | None = None  # None: earliest for a batch, latest for a stream
    ending_offsets: OffsetSpec = "latest"
    min_partitions: int | None = None
    tags: tuple[str, ...] = ()
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    max_offsets_per_trigger: int | None = None  # streams only (a batch ignores it, as Kafka's)
    ending_given: bool = False
    # Start at the first offset whose timestamp is >= this (ms), per partition (the latest
    # offset if none is); resolved on the driver into ``starting_offsets`` by ``plan``.
    starting_timestamp: int | None = None
    starting_timestamps: dict[str, dict[int, int]] | None = None  # topic -> partition -> ms
    group_id: str | None = None  # streams only: the group their progress is committed to
    # "read_committed": ends at each partition's last stable offset, and leaves out aborted
    # transactions' records (docs/transactions.md); "read_uncommitted" (default) reads all.
    isolation_level: str = "read_uncommitted"


@dataclass(frozen=True)
class WriteOptions:
    """A batch write: where to, and how the per-worker producer is set up."""

    conn: Connection
    topic: str | None = None
    idempotent: bool = True
    linger_ms: int = 5
    batch_bytes: int = MAX_BATCH_BYTES  # the producer's default
    sink_id: str | None = None  # streaming: names the exactly-once sink
    checkpoint_location: str | None = None  # streaming: the sink id comes from it by default


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """Check a read's options (no network); raises :class:`OptionError` naming the option."""
    opts = _lowered(options, READ_OPTIONS)
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(chosen) != 1:
        given = ", ".join(chosen) or "none of them"
        raise OptionError("subscribe", "give exactly one of subscribe, subscribePattern or "
                                       f"assign (got {given})")
    starts = [name for key, name in STARTS.items() if opts.get(key)]
    if len(starts) > 1:
        raise OptionError(starts[1], f"cannot be combined with {starts[0]}: give one of "
                                     "startingOffsets, startingTimestamp or "
                                     "startingOffsetsByTimestamp")
    pattern = opts.get("subscribepattern")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError("subscribePattern", f"not a regular expression: {exc}") from None
    return ReadOptions(
        conn=_connection(opts),
        subscribe=_names("subscribe", opts.get("subscribe", "")),
        subscribe_pattern=pattern or None,
        assign=_assign(opts["assign"]) if opts.get("assign") else None,
        starting_offsets=(_offsets("startingOffsets", opts["startingoffsets"])
                          if opts.get("startingoffsets") else None),
        ending_offsets=_offsets("endingOffsets", opts.get("endingoffsets", "latest")),
        min_partitions=_int("minPartitions", opts.get("minpartitions"), 1, None),
        tags=tuple(t.strip() for t in opts.get("tags", "").split(",") if t.strip()),
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        poll_timeout_ms=_int("pollTimeoutMs", opts.get("polltimeoutms"), 1, 120_000),
        max_offsets_per_trigger=_int("maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger"),
                                     1, None),
        ending_given=bool(opts.get("endingoffsets")),
        starting_timestamp=_int("startingTimestamp", opts.get("startingtimestamp"), 0, None),
        starting_timestamps=(_timestamps(opts["startingoffsetsbytimestamp"])
                             if opts.get("startingoffsetsbytimestamp") else None),
        group_id=_group(opts.get("groupid", "")),
        isolation_level=_isolation(opts.get("isolationlevel", "read_uncommitted")),
    )


def _isolation(value: str) -> str:
    if value not in ("read_uncommitted", "read_committed"):
        raise OptionError("isolationLevel", f"must be read_uncommitted or read_committed, got "
                                            f"{value!r}")
    return value


def write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check a write's options (no network); raises :class:`OptionError` naming the option."""
    opts = _lowered(options, WRITE_OPTIONS)
    topic = opts.get("topic") or None
    if topic is not None:
        _names("topic", topic)
    return WriteOptions(
        conn=_connection(opts), topic=topic,
        idempotent=_bool("idempotent", opts.get("idempotent", "true")),
        linger_ms=_int("lingerMs", opts.get("lingerms"), 0, 5),
        batch_bytes=_int("batchBytes", opts.get("batchbytes"), 1, MAX_BATCH_BYTES,
                         high=MAX_BATCH_BYTES),
        sink_id=_sink_id(opts["sinkid"]) if opts.get("sinkid") else None,
        checkpoint_location=opts.get("checkpointlocation") or None)


def _lowered(options: Mapping[str, str], known: set[str]) -> dict[str, str]:
    """The options keyed in lower case (Spark's map is case-insensitive); unknown ones refused."""
    opts = {str(k).lower(): str(v) for k, v in dict(options).items() if v is not None}
    opts.pop("path", None)  # load(path) / save(path): Spark passes it along, nothing uses it
    for key in opts:
        if key in NOT_SUPPORTED:
            instead = NOT_SUPPORTED[key]
            hint = f"use {instead!r}" if instead else "not supported by tubeq yet"
            raise OptionError(key, hint)
        if key not in known:
            raise OptionError(key, f"unknown option (known: {', '.join(sorted(known))})")
    return opts


def _connection(opts: dict[str, str]) -> Connection:
    """The cluster and the credentials: one way to log in at most, and whole pairs."""
    logins = [name for key, name in (("user", "user"), ("token", "token"),
                                     ("credentialsfile", "credentialsFile")) if opts.get(key)]
    if len(logins) > 1:
        raise OptionError(logins[1], f"cannot be combined with {logins[0]}: give one of user "
                                     "(with password), token or credentialsFile")
    if opts.get("user") and not opts.get("password"):
        raise OptionError("password", "required with user")
    if opts.get("password") and not opts.get("user"):
        raise OptionError("user", "required with password")
    if bool(opts.get("tlscert")) != bool(opts.get("tlskey")):
        raise OptionError("tlsCert" if opts.get("tlskey") else "tlsKey",
                          "tlsCert and tlsKey go together (a client certificate and its key)")
    if opts.get("tlscert") and not opts.get("tlsca"):
        raise OptionError("tlsCa", "required with tlsCert: the CA the servers' certificates "
                                   "chain to")
    return Connection(_masters(opts), opts.get("user", ""), opts.get("password", ""),
                      opts.get("token", ""), opts.get("credentialsfile", ""),
                      opts.get("tlsca", ""), opts.get("tlscert", ""), opts.get("tlskey", ""),
                      _int("requestTimeoutMs", opts.get("requesttimeoutms"), 1, None))


def _masters(opts: dict[str, str]) -> str:
    masters = ",".join(a.strip() for a in opts.get("masters", "").split(",") if a.strip())
    if not masters:
        raise OptionError("masters", "required: the tubeq master addresses, host:port,...")
    for address in masters.split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise OptionError("masters", f"{address!r} is not host:port")
    return masters


def _sink_id(text: str) -> str:
    try:
        return check_name(text.strip(), "sink")
    except InvalidArgument as exc:
        raise OptionError("sinkId", exc.message) from None


def _names(option: str, text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    for name in names:
        try:
            check_name(name, "topic")
        except InvalidArgument as exc:
            raise OptionError(option, exc.message) from None
    return names


def _json(option: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(option, f"not valid JSON ({exc.msg} at {exc.pos}): {text!r}") from None


def _assign(text: str) -> dict[str, tuple[int, ...]]:
    raw = _json("assign", text)
    if not isinstance(raw, dict) or not raw:
        raise OptionError("assign", 'expected a JSON object like {"topic": [0, 1]}')
    out = {}
    for topic, parts in raw.items():
        _names("assign", topic)
        if not isinstance(parts, list) or not all(_is_int(p) and p >= 0 for p in parts):
            raise OptionError("assign", f"{topic!r} needs a list of partition numbers")
        out[topic] = tuple(sorted(set(parts)))
    return out


def _offsets(option: str, text: str) -> OffsetSpec:
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return word
    raw = _json(option, text)
    if not isinstance(raw, dict):
        raise OptionError(option, 'expected "earliest", "latest" or JSON like '
                                  '{"topic": {"0": 5}}')
    return _per_partition(option, raw, "offset", EARLIEST,
                          "offsets are >= 0, -2 (earliest) or -1 (latest)")


def _timestamps(text: str) -> dict[str, dict[int, int]]:
    option = "startingOffsetsByTimestamp"
    raw = _json(option, text)
    if not isinstance(raw, dict) or not raw:
        raise OptionError(option, 'expected JSON like {"topic": {"0": 1700000000000}} '
                                  "(epoch milliseconds per partition)")
    return _per_partition(option, raw, "timestamp", 0, "timestamps are epoch milliseconds >= 0")


def _per_partition(option: str, raw: dict, what: str, low: int,
                   rule: str) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": n}}`` checked: topic names, partition numbers, integers >= ``low``."""
    out: dict[str, dict[int, int]] = {}
    for topic, parts in raw.items():
        _names(option, topic)
        if not isinstance(parts, dict):
            raise OptionError(option, f"{topic!r} needs an object of partition -> {what}")
        out[topic] = {}
        for part, value in parts.items():
            if not str(part).isdigit() or not _is_int(value) or value < low:
                raise OptionError(option, f"{topic}[{part}] = {value!r}: partitions are "
                                          f"numbers, {rule}")
            out[topic][int(part)] = value
    return out


def _group(text: str) -> str | None:
    group = text.strip()
    if not group:
        return None
    try:
        return check_name(group, "group")
    except InvalidArgument as exc:
        raise OptionError("groupId", exc.message) from None


def _int(option: str, text: str | None, low: int, default: Any, high: int | None = None) -> Any:
    if text is None or text.strip() == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise OptionError(option, f"expected an integer, got {text!r}") from None
    if value < low:
        raise OptionError(option, f"must be >= {low}, got {value}")
    if high is not None and value > high:
        raise OptionError(option, f"must be <= {high}, got {value}")
    return value


def _bool(option: str, text: str) -> bool:
    word = text.strip().lower()
    if word not in ("true", "false"):
        raise OptionError(option, f"expected true or false, got {text!r}")
    return word == "true"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
