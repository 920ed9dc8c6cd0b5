"""tubeq client library and shared protocol code (imports nothing else of ours).

Public API::

    from lib import Producer, PullConsumer, PushConsumer, AdminClient, MessageReader, Record, \
        TopicPartition

The names are imported lazily (PEP 562) so ``import lib.records`` on a broker does not pull in
gRPC clients, and so each part imports even while another is missing.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Producer": "lib.producer.producer",
    "ProducerConfig": "lib.producer.producer",
    "PullConsumer": "lib.consumer.pull",
    "PushConsumer": "lib.consumer.push",
    "AdminClient": "lib.admin",
    "MessageReader": "lib.consumer.reader",
    "Record": "lib.records",
    "RecordMetadata": "lib.types",
    "TopicPartition": "lib.types",
    "RetryPolicy": "lib.retry",
    "Later": "lib.consumer.retry",
    "RETRY_LATER": "lib.consumer.retry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
