"""The producer: :class:`Producer` is a facade over an accumulator (per-partition batches,
bounded memory) and one sender thread (Produce calls, retries, idempotence).

``producer.py`` the facade, ``config.py`` its settings, ``encoder.py`` a record's partition and
frame, ``accumulator.py`` batching, ``sender.py`` the wire side, ``partitioner.py`` where a
record goes, ``futures.py`` what ``send`` returns, ``transactional.py`` the transactional
API mixed into the producer, over ``transaction.py`` (a transactional producer's state and
coordinator calls) and ``half.py`` (RocketMQ's half messages and check-back).
"""
from lib.producer.producer import Producer, ProducerConfig

__all__ = ["Producer", "ProducerConfig"]
