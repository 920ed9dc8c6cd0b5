"""The producer: :class:`Producer` is a facade over an accumulator (per-partition batches,
bounded memory) and one sender thread (Produce calls, retries, idempotence).

``producer.py`` the facade and its config, ``accumulator.py`` batching, ``sender.py`` the wire
side, ``partitioner.py`` where a record goes, ``futures.py`` what ``send`` returns.
"""
from lib.producer.producer import Producer, ProducerConfig

__all__ = ["Producer", "ProducerConfig"]
