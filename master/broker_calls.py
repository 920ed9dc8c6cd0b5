"""The master's calls to brokers: ListOffsets, FetchOffsets (no claim), ResetOffsets, and the
transaction coordinator's WriteTxnMarkers.

Used by describe and reset. Each call has a short deadline (``timeout_s``, ~1 s) so one dead
broker cannot stall an admin request; calls to different brokers run concurrently. Markers
have their own deadline (``marker_timeout_s``): a broker answers them once they are fsynced
and held by the in-sync replicas.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lib.auth.settings import cluster_header
from lib.proto import broker_pb2 as bpb
from lib.proto import broker_pb2_grpc
from lib.rpc import ChannelPool, invoke
from lib.tls import Tls

T = TypeVar("T")
NO_TIME = -1


class BrokerCalls:
    def __init__(self, timeout_s: float = 1.0, workers: int = 8,
                 cluster_secret: str = "", tls: Tls | None = None,
                 marker_timeout_s: float = 5.0) -> None:
        self.timeout_s, self.marker_timeout_s = timeout_s, marker_timeout_s
        self._metadata = cluster_header(cluster_secret)  # brokers with auth on need it
        self._pool = ChannelPool(tls=tls)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="to-broker")

    def _stub(self, address: str) -> broker_pb2_grpc.BrokerStub:
        return broker_pb2_grpc.BrokerStub(self._pool.get(address))

    def list_offsets(self, address: str, topic: str, partitions: list[int],
                     timestamp_ms: int = NO_TIME) -> dict[int, bpb.PartitionOffsets]:
        req = bpb.ListOffsetsRequest(topic=topic, partitions=partitions,
                                     timestamp_ms=timestamp_ms)
        res = invoke(self._stub(address).ListOffsets, req, self.timeout_s, self._metadata)
        return {po.partition: po for po in res.partitions}

    def committed(self, address: str, group: str, topic: str,
                  partitions: list[int], instance: str = "") -> dict[int, int]:
        """Committed offsets (a broadcast ``instance``'s), read WITHOUT a member id: the
        broker records no claim."""
        req = bpb.FetchOffsetsRequest(group=group, topic=topic, partitions=partitions,
                                      member_id="", generation=-1, instance_id=instance)
        res = invoke(self._stub(address).FetchOffsets, req, self.timeout_s, self._metadata)
        return {c.partition: c.offset for c in res.offsets}

    def instances(self, address: str, group: str, topic: str,
                  partitions: list[int]) -> dict[tuple[str, int], int]:
        """Every broadcast instance's committed offsets: (instance id, partition) -> offset."""
        req = bpb.FetchOffsetsRequest(group=group, topic=topic, partitions=partitions,
                                      all_instances=True)
        res = invoke(self._stub(address).FetchOffsets, req, self.timeout_s, self._metadata)
        return {(c.instance_id, c.partition): c.offset for c in res.offsets}

    def reset(self, address: str, group: str, topic: str, offsets: dict[int, int],
              term: int, instance: str = "") -> None:
        items = [bpb.OffsetCommit(partition=p, offset=o) for p, o in sorted(offsets.items())]
        req = bpb.ResetOffsetsRequest(group=group, topic=topic, offsets=items, term=term,
                                      instance_id=instance)
        invoke(self._stub(address).ResetOffsets, req, self.timeout_s, self._metadata)

    def write_markers(self, address: str, producer_id: int, producer_epoch: int, commit: bool,
                      partitions: list[tuple[str, int]],
                      offsets: list[tuple[str, str, int, int]] = ()
                      ) -> list[bpb.TxnMarkerResult]:
        """A transaction's marker in each partition the broker leads, and its consumer
        offsets (group, topic, partition, offset) there (per-target errors in the results;
        a failed call raises)."""
        req = bpb.WriteTxnMarkersRequest(
            producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
            partitions=[bpb.TxnMarkerPartition(topic=t, partition=p) for t, p in partitions],
            offsets=[bpb.TxnMarkerOffset(group=g, topic=t, partition=p, offset=o)
                     for g, t, p, o in offsets])
        res = invoke(self._stub(address).WriteTxnMarkers, req, self.marker_timeout_s,
                     self._metadata)
        return list(res.results)

    def each(self, jobs: dict[int, Callable[[], T]]) -> dict[int, T | Exception]:
        """Run one job per broker concurrently; a failed job's value is its exception."""
        futures = {key: self._executor.submit(job) for key, job in jobs.items()}
        out: dict[int, T | Exception] = {}
        for key, fut in futures.items():
            try:
                out[key] = fut.result()
            except Exception as exc:  # noqa: BLE001 - returned to the caller, per broker
                out[key] = exc
        return out

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._pool.close()
