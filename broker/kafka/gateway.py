"""The Kafka protocol's requests, answered over the broker's own planes.

One :class:`Gateway` per broker; the listener (broker/kafka/listener.py) hands it each
request of a connection in order, as Kafka's brokers serve a connection (one request at a
time, answers in order). Handlers are coroutines on the broker's event loop; what may block
(master calls, reads far from the tail, appends that wait) goes to the broker's executor, as
the gRPC handlers' does. Every API served here is listed in :data:`broker.kafka.wire.SERVED`
with its versions; a served API at another version is answered with UNSUPPORTED_VERSION.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import InitProducerIdResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from broker.kafka import admin, groups, txn, wire
from broker.kafka.fetch import fetch, list_offsets
from broker.kafka.produce import produce
from broker.kafka.refusals import refuse
from broker.kafka.session import Authenticating, Session, plain_login
from lib.auth.quotas import QuotaBook
from lib.errors import TubeqError, UnknownTopic
from lib.logs import event
from lib.names import check_name
from lib.proto import master_pb2 as mpb
from lib.proto import master_pb2_grpc

log = logging.getLogger(__name__)
Handler = Callable[[Session, Any], Awaitable[Any]]
CLUSTER_ID = "tubeq"
ROUTES_TTL_S = 1.0
MAX_CACHED_ROUTES = 10_000
PUBLIC_APIS = frozenset({18, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate
SASL_MECHANISMS = ["PLAIN", "SCRAM-SHA-256"]


def serve(api_key: int, low: int, high: int) -> Callable[[Handler], Handler]:
    """Mark a Gateway method as the handler of ``api_key`` at versions low..high."""
    def mark(fn: Handler) -> Handler:
        wire.SERVED[api_key] = (low, high)
        fn.api_key = api_key  # type: ignore[attr-defined]
        return fn
    return mark


class Gateway:
    """``master(stub, method, request)`` calls the active master as the cluster (blocking);
    ``run(fn, *args)`` runs ``fn`` in the broker's executor; ``auth`` is None with the
    broker's ``auth = "none"``."""

    def __init__(self, broker_id: int, data: Any, replication: Any, run: Callable[..., Any],
                 master: Callable[[Any, str, Any], Any] | None,
                 peer: Callable[[str, str, Any], Any] | None,
                 auth: Authenticating | None, fetch_max_wait_ms: int, fetch_max_bytes: int,
                 quotas: QuotaBook | None = None) -> None:
        self.quotas = quotas or QuotaBook()  # byte-rate quotas, as on the gRPC port
        self.broker_id = broker_id
        self.peer = peer  # peer(grpc address, method, request): a broker call as the cluster
        self.advertised: tuple[str, int] | None = None  # this listener's, once bound
        self._leaders: dict[str, tuple[float, dict[int, str]]] = {}
        self._brokers: tuple[float, dict[int, str]] = (-ROUTES_TTL_S, {})
        self.data, self.topics, self.replication = data, data.topics, replication
        self.run, self.master, self.auth = run, master, auth
        self.fetch_max_wait_ms, self.fetch_max_bytes = fetch_max_wait_ms, fetch_max_bytes
        self.handlers: dict[int, Handler] = {}
        for name in dir(self):
            fn = getattr(self, name)
            if callable(fn) and hasattr(fn, "api_key"):
                self.handlers[fn.api_key] = fn

    async def answer(self, session: Session, payload: bytes) -> bytes | None:
        """The framed answer to one request (None: acks=0 produce); wire.Malformed when the
        connection must be closed."""
        if session.raw_sasl:  # after a SaslHandshake v0: the SASL messages, unframed
            return await self._raw_sasl(session, payload)
        if session.expired():
            raise wire.Malformed("the SASL session's token expired: authenticate again")
        api_key, version, correlation_id = wire.peek_header(payload)
        served = wire.SERVED.get(api_key)
        if api_key == wire.API_VERSIONS_KEY and not served[0] <= version <= served[1]:
            # Kafka's rule: an ApiVersions the broker cannot read is answered at v0
            return wire.encode_response(self._versions(0, wire.UNSUPPORTED_VERSION),
                                        correlation_id)
        if served is None:
            return self._unsupported(api_key, version, correlation_id, session)
        request = wire.decode_request(payload, api_key, version)
        if not served[0] <= version <= served[1]:
            response = self.refusal(api_key, request, wire.UNSUPPORTED_VERSION)
        elif session.access is None and api_key not in PUBLIC_APIS:
            response = self.refusal(api_key, request, wire.SASL_AUTHENTICATION_FAILED)
        else:
            if session.needs_renewal():
                await self.run(self.auth.authenticate, session, session.login)
            if api_key not in PUBLIC_APIS and not _reachable(session):
                response = self.refusal(api_key, request, wire.CLUSTER_AUTHORIZATION_FAILED)
            else:
                response = await self._handled(api_key, session, request)
        if response is None:
            return None
        response.API_VERSION = version
        return wire.encode_response(response, correlation_id)

    async def _handled(self, api_key: int, session: Session, request: Any) -> Any:
        """The handler's answer; a tubeq error it did not turn into the API's own (the
        master unreachable, say) refuses the whole request with its Kafka code, which
        clients retry when it is retriable, instead of dropping the connection."""
        try:
            return await self.handlers[api_key](session, request)
        except TubeqError as err:
            event(log, "kafka.request_failed", logging.WARNING, api=request.name,
                  error=err.message[:300])
            return self.refusal(api_key, request, wire.kafka_code(err.code))

    @staticmethod
    def _unsupported(api_key: int, version: int, correlation_id: int,
                     session: Session) -> bytes:
        """An API this port does not serve (ApiVersions says which it does): answered with
        the API's own response, empty, carrying UNSUPPORTED_VERSION where it has an error
        code; an API key Kafka does not define closes the connection. Logged either way."""
        cls = wire.response_class(api_key)
        event(log, "kafka.unsupported_api", logging.INFO, api_key=api_key, version=version,
              peer=session.peer)
        if cls is None:
            raise wire.Malformed(f"api key {api_key} is not a Kafka API")
        response = cls[version if 0 <= version <= cls.max_version else 0]()
        if any(f["name"] == "ErrorCode" for f in cls.json["fields"]):
            response.error_code = wire.UNSUPPORTED_VERSION
        return wire.encode_response(response, correlation_id)

    def refusal(self, api_key: int, request: Any, code: int) -> Any:
        """An answer to ``request`` that refuses all of it with ``code``."""
        return refuse(api_key, request, code)

    # ------------------------------------------------------------------ data

    @serve(0, 3, 9)
    async def produce(self, session: Session, request: Any) -> Any:
        return await produce(self, session, request)

    @serve(1, 4, 12)
    async def fetch(self, session: Session, request: Any) -> Any:
        return await fetch(self, session, request)

    @serve(2, 1, 6)
    async def list_offsets(self, session: Session, request: Any) -> Any:
        return await self.run(list_offsets, self, session, request)

    # ------------------------------------------------------------------ cluster

    @serve(18, 0, 3)
    async def api_versions(self, session: Session, request: Any) -> Any:
        return self._versions(request.API_VERSION, wire.NONE)

    @staticmethod
    def _versions(version: int, code: int) -> Any:
        keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(wire.SERVED.items())]
        return ApiVersionsResponse[version](error_code=code, api_keys=keys, throttle_time_ms=0)

    @serve(3, 0, 12)
    async def metadata(self, session: Session, request: Any) -> Any:
        """Brokers (their Kafka listeners), the controller (the live broker of lowest id: it
        forwards admin calls to the active master) and the partitions' leaders."""
        names = None if request.topics is None else [t.name for t in request.topics]
        if request.API_VERSION == 0 and not names:
            names = None  # v0: an empty list means every topic
        wanted = [n for n in names or () if _valid(n)]
        routes = await self._routes(None if names is None else wanted)
        brokers = dict(routes.kafka_addresses)
        by_name = {r.topic: r for r in routes.routes}
        out = []
        for name in (sorted(by_name) if names is None else names):
            route = by_name.get(name)
            if route is None:
                code = wire.INVALID_TOPIC_EXCEPTION if not _valid(name) \
                    else wire.UNKNOWN_TOPIC_OR_PARTITION
                out.append(MetadataResponse.MetadataResponseTopic(
                    error_code=code, name=name, partitions=[]))
            elif not session.access.allowed("describe", "topic", name):
                out.append(MetadataResponse.MetadataResponseTopic(
                    error_code=wire.TOPIC_AUTHORIZATION_FAILED, name=name, partitions=[]))
            else:
                out.append(_topic_metadata(route, brokers))
        nodes = [MetadataResponse.MetadataResponseBroker(node_id=b, host=_host(a),
                                                          port=_port(a), rack=None)
                 for b, a in sorted(brokers.items())]
        return MetadataResponse(throttle_time_ms=0, brokers=nodes, cluster_id=CLUSTER_ID,
                                controller_id=min(brokers, default=-1), topics=out)

    async def _routes(self, names: list[str] | None) -> mpb.GetRoutesResponse:
        """The routes of ``names`` (None: every topic); unknown names are left out (the
        master refuses a call naming one: it is asked again without it)."""
        names = None if names is None else list(dict.fromkeys(names))
        if names == []:
            return mpb.GetRoutesResponse(kafka_addresses=await self.kafka_brokers())
        while True:
            try:
                return await self.run(self.master, master_pb2_grpc.MasterStub, "GetRoutes",
                                      mpb.GetRoutesRequest(topics=names or []))
            except UnknownTopic as err:
                gone = err.details.get("topic")
                if names is None or gone not in names:
                    raise
                names.remove(gone)
                if not names:
                    return mpb.GetRoutesResponse(
                        kafka_addresses=(await self.kafka_brokers()))

    @serve(22, 0, 4)
    async def init_producer_id(self, session: Session, request: Any) -> Any:
        """A producer id and epoch from the active master: the same ids tubeq's own idempotent
        producers get, so the store's sequence checks serve Kafka producers unchanged; with a
        transactional.id, the coordinator's (broker/kafka/txn.py)."""
        if request.transactional_id:
            return await txn.init_transactional(self, session, request)
        try:
            session.access.check_somewhere("produce", "topic", "a producer id")  # KIP-679
        except TubeqError:
            return InitProducerIdResponse(error_code=wire.CLUSTER_AUTHORIZATION_FAILED,
                                          producer_id=-1, producer_epoch=-1, throttle_time_ms=0)
        try:
            res = await self.run(self.master, master_pb2_grpc.MasterStub, "InitProducerId",
                                 mpb.InitProducerIdRequest(client_id="kafka"))
        except TubeqError as err:
            event(log, "kafka.init_producer_id_failed", logging.WARNING, error=err.message)
            return InitProducerIdResponse(error_code=wire.COORDINATOR_NOT_AVAILABLE,
                                          producer_id=-1, producer_epoch=-1, throttle_time_ms=0)
        return InitProducerIdResponse(error_code=wire.NONE, producer_id=res.producer_id,
                                      producer_epoch=res.producer_epoch, throttle_time_ms=0)

    async def kafka_brokers(self) -> dict[int, str]:
        """Broker id -> Kafka listener of the live brokers (from the master, kept a second)."""
        now = time.monotonic()
        if now - self._brokers[0] >= ROUTES_TTL_S:
            res = await self.run(self.master, master_pb2_grpc.MasterStub, "GetRoutes",
                                 mpb.GetRoutesRequest(brokers_only=True))
            self._brokers = (now, dict(res.kafka_addresses))
        return self._brokers[1]

    async def leaders(self, topic: str) -> dict[int, str]:
        """Partition -> gRPC address of its leader (from the master, kept a second)."""
        now = time.monotonic()
        hit = self._leaders.get(topic)
        if hit is not None and now - hit[0] < ROUTES_TTL_S:
            return hit[1]
        res = await self.run(self.master, master_pb2_grpc.MasterStub, "GetRoutes",
                             mpb.GetRoutesRequest(topics=[topic]))
        leaders = {p.partition: p.address for r in res.routes for p in r.partitions
                   if p.available and p.address}
        if len(self._leaders) > MAX_CACHED_ROUTES:
            self._leaders.clear()
        self._leaders[topic] = (now, leaders)
        return leaders

    # ------------------------------------------------------------------ groups

    @serve(10, 0, 4)
    async def find_coordinator(self, session: Session, request: Any) -> Any:
        return await groups.find_coordinator(self, session, request)

    @serve(11, 0, 7)
    async def join_group(self, session: Session, request: Any) -> Any:
        return await groups.join_group(self, session, request)

    @serve(14, 0, 5)
    async def sync_group(self, session: Session, request: Any) -> Any:
        return await groups.sync_group(self, session, request)

    @serve(12, 0, 4)
    async def heartbeat(self, session: Session, request: Any) -> Any:
        return await groups.heartbeat(self, session, request)

    @serve(13, 0, 4)
    async def leave_group(self, session: Session, request: Any) -> Any:
        return await groups.leave_group(self, session, request)

    @serve(8, 2, 8)
    async def offset_commit(self, session: Session, request: Any) -> Any:
        return await groups.offset_commit(self, session, request)

    @serve(9, 1, 7)
    async def offset_fetch(self, session: Session, request: Any) -> Any:
        return await groups.offset_fetch(self, session, request)

    @serve(16, 0, 4)
    async def list_groups(self, session: Session, request: Any) -> Any:
        return await groups.list_groups(self, session, request)

    @serve(15, 0, 5)
    async def describe_groups(self, session: Session, request: Any) -> Any:
        return await groups.describe_groups(self, session, request)

    # ------------------------------------------------------------------ transactions

    @serve(24, 0, 3)
    async def add_partitions_to_txn(self, session: Session, request: Any) -> Any:
        return await txn.add_partitions(self, session, request)

    @serve(25, 0, 3)
    async def add_offsets_to_txn(self, session: Session, request: Any) -> Any:
        return await txn.add_offsets(self, session, request)

    @serve(28, 0, 3)
    async def txn_offset_commit(self, session: Session, request: Any) -> Any:
        return await txn.txn_offset_commit(self, session, request)

    @serve(26, 0, 3)
    async def end_txn(self, session: Session, request: Any) -> Any:
        return await txn.end_txn(self, session, request)

    # ------------------------------------------------------------------ admin

    @serve(19, 2, 5)
    async def create_topics(self, session: Session, request: Any) -> Any:
        return await admin.create_topics(self, session, request)

    @serve(20, 1, 5)
    async def delete_topics(self, session: Session, request: Any) -> Any:
        return await admin.delete_topics(self, session, request)

    @serve(37, 0, 3)
    async def create_partitions(self, session: Session, request: Any) -> Any:
        return await admin.create_partitions(self, session, request)

    @serve(32, 1, 4)
    async def describe_configs(self, session: Session, request: Any) -> Any:
        return await admin.describe_configs(self, session, request)

    # ------------------------------------------------------------------ SASL

    @serve(17, 0, 1)
    async def sasl_handshake(self, session: Session, request: Any) -> Any:
        """v1: SaslAuthenticate requests follow; v0 (older librdkafka, Debian's kcat): the
        next frame is the bare PLAIN message, answered with an empty frame."""
        if self.auth is None or request.mechanism not in SASL_MECHANISMS:
            return SaslHandshakeResponse(error_code=wire.UNSUPPORTED_SASL_MECHANISM,
                                         mechanisms=SASL_MECHANISMS if self.auth else [])
        session.mechanism = request.mechanism
        session.raw_sasl = request.API_VERSION == 0
        return SaslHandshakeResponse(error_code=wire.NONE, mechanisms=SASL_MECHANISMS)

    async def _raw_sasl(self, session: Session, payload: bytes) -> bytes:
        try:
            answer = await self._sasl_step(session, payload)
        except TubeqError as err:
            raise wire.Malformed(f"SASL (handshake v0) refused: {err.message}") from None
        session.raw_sasl = bool(session.scram_exchange)  # SCRAM: its final message is next
        return wire.SIZE.pack(len(answer)) + answer

    async def _sasl_step(self, session: Session, message: bytes) -> bytes:
        """The mechanism's next step; the server's message (b"" for PLAIN)."""
        if session.mechanism == "PLAIN":
            await self.run(self.auth.authenticate, session, plain_login(message))
            return b""
        return await self.run(self.auth.scram_step, session, message)

    @serve(36, 0, 2)
    async def sasl_authenticate(self, session: Session, request: Any) -> Any:
        """PLAIN (one message) or SCRAM-SHA-256 (two) (broker/kafka/session.py); a failure
        is answered, then the listener closes the connection, as Kafka's brokers do."""
        if not session.mechanism:
            return SaslAuthenticateResponse(
                error_code=wire.ILLEGAL_SASL_STATE, auth_bytes=b"", session_lifetime_ms=0,
                error_message="SaslAuthenticate before a SaslHandshake naming PLAIN")
        try:
            answer = await self._sasl_step(session, request.auth_bytes)
        except TubeqError as err:
            session.access = None
            session.closing = True
            return SaslAuthenticateResponse(error_code=wire.SASL_AUTHENTICATION_FAILED,
                                            error_message=err.message[:500], auth_bytes=b"",
                                            session_lifetime_ms=0)
        lifetime = 0
        if session.login is None and session.expires_ms and not session.scram_exchange:
            lifetime = max(0, session.expires_ms - int(time.time() * 1000))  # KIP-368
        return SaslAuthenticateResponse(error_code=wire.NONE, error_message=None,
                                        auth_bytes=answer, session_lifetime_ms=lifetime)


def _reachable(session: Session) -> bool:
    """Whether the cluster's IP lists let the client in (checked at every request: the
    lists may change while a connection lives)."""
    try:
        session.access.check_address()
    except TubeqError:
        return False
    return True


def _valid(name: str | None) -> bool:
    try:
        check_name(name or "", "topic")
    except TubeqError:
        return False
    return True


def _host(address: str) -> str:
    return address.rsplit(":", 1)[0]


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _topic_metadata(route: mpb.TopicRoute, brokers: dict[int, str]) -> Any:
    parts = []
    for p in route.partitions:
        live = p.available and p.broker_id in brokers
        parts.append(MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
            error_code=wire.NONE if live else wire.LEADER_NOT_AVAILABLE,
            partition_index=p.partition, leader_id=p.broker_id if live else -1,
            leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas) or [p.broker_id],
            isr_nodes=list(p.isr) or [p.broker_id], offline_replicas=[]))
    return MetadataResponse.MetadataResponseTopic(error_code=wire.NONE, name=route.topic,
                                                  is_internal=False, partitions=parts)
