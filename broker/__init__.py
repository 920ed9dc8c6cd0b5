"""The broker process (data plane): ``python -m broker``; built by :class:`broker.server.Broker`.

Modules: ``config`` (BrokerConfig), ``topics`` (stores of the placed partitions), ``data``
(produce, fetch, offsets lookup, query), ``push`` (credit-based Subscribe), ``offsets`` and
``claims`` (committed offsets with generation fencing), ``dedup`` (idempotent producers),
``master_link`` (register + heartbeat), ``metrics``, ``service`` (gRPC servicer), ``server``.
"""
from lib.process import one_blas_thread

one_blas_thread()  # before any module of the package loads numpy

