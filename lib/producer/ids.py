"""An idempotent producer's id and epoch, from the active master (Kafka's InitProducerId).

The active master hands ids out of blocks it reserves in the replicated state
(master/producer_ids.py): every id is >= 1 and no two calls, on any master, ever get the same
one, across failovers and restarts too. The epoch is 0 (no transactional_id yet). Permission:
``produce`` on at least one topic (literal or prefix; the admin role and the cluster
credential pass).
"""
from __future__ import annotations

from lib.errors import TubeqError
from lib.proto import master_pb2, master_pb2_grpc
from lib.rpc import MasterClient


def init_producer_id(master: MasterClient, client_id: str, timeout_s: float) -> tuple[int, int]:
    """(producer id, producer epoch) from the active master.

    Goes through :meth:`MasterClient.call`: a standby's NotLeader is followed to the active
    master, and NotLeader, Unavailable and RequestTimedOut (an election, a master down, a
    reservation that found no quorum) are retried until ``timeout_s`` passes; then Unavailable
    is raised (retriable). PermissionDenied (no ACL lets the caller produce to any topic) and
    Unauthenticated are raised at once. A retry after a lost answer costs one id, never a
    duplicate. ``client_id`` only names the producer in the master's log.
    """
    response = master.call(master_pb2_grpc.MasterStub, "InitProducerId",
                           master_pb2.InitProducerIdRequest(client_id=client_id),
                           timeout=timeout_s)
    if response.producer_id < 1 or response.producer_epoch < 0:
        raise TubeqError(f"the master answered an invalid producer id {response.producer_id} "
                         f"(epoch {response.producer_epoch})")
    return response.producer_id, response.producer_epoch
