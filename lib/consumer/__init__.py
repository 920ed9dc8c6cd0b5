"""The consumers: pull (:class:`PullConsumer`, ``pull.py``) and push (:class:`PushConsumer`,
``push.py``) share one subscription state (``subscription.py``: assignment, positions, epochs,
pure data), one group coordinator and offset client (``coordinator.py``: join, heartbeat,
commits) and, for pull, the prefetching fetcher (``fetcher.py``). ``reader.py``
(:class:`MessageReader`) reads stored messages by offset or time without consuming them.
"""
from lib.consumer.pull import ConsumerConfig, PullConsumer
from lib.consumer.push import PushConfig, PushConsumer

__all__ = ["ConsumerConfig", "PullConsumer", "PushConfig", "PushConsumer"]
