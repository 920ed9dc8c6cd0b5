"""Every client takes ``config=`` and/or ``**settings`` and validates whatever it is given."""
from __future__ import annotations

import pytest

from lib import PullConsumer, PushConsumer, errors
from lib.consumer.pull import ConsumerConfig
from lib.consumer.push import PushConfig
from lib.producer.producer import Producer, ProducerConfig

NOWHERE = "127.0.0.1:1"  # nothing is called before the first send/poll


def test_a_hand_built_producer_config_is_validated():
    """Regression: Producer(config=...) skipped validate()."""
    with pytest.raises(errors.ConfigError, match="linger_ms must be >= 0"):
        Producer(NOWHERE, config=ProducerConfig(linger_ms=-1))


@pytest.mark.parametrize("client, config, bad", [
    (PullConsumer, ConsumerConfig(), {"max_poll_records": 0}),
    (PushConsumer, PushConfig(group="g"), {"max_inflight_messages": 0}),
])
def test_consumers_take_config_and_settings_and_validate_both(client, config, bad):
    consumer = client(NOWHERE, config=config, client_id="from-settings")
    try:
        assert consumer.config.client_id == "from-settings"  # settings go on top of config
    finally:
        consumer.close()
    with pytest.raises(errors.InvalidArgument, match=next(iter(bad))):
        client(NOWHERE, config=type(config)(**{**config.__dict__, **bad}))
    with pytest.raises(errors.InvalidArgument, match="unknown"):
        client(NOWHERE, config=config, no_such_setting=1)


def test_a_config_of_the_wrong_kind_is_refused():
    with pytest.raises(errors.InvalidArgument, match="must be a ConsumerConfig"):
        PullConsumer(NOWHERE, config=ProducerConfig())
    with pytest.raises(errors.InvalidArgument, match="needs a group"):
        PushConsumer(NOWHERE)


def test_a_transactional_producer_waits_for_every_in_sync_replica():
    assert not ProducerConfig().acks_all and ProducerConfig(acks="all").acks_all
    assert ProducerConfig(transactional_id="t").acks_all, "the default becomes all"
    with pytest.raises(errors.ConfigError, match="transactional producer needs acks='all'"):
        Producer(NOWHERE, transactional_id="t", acks="1")


@pytest.mark.parametrize(("args", "kwargs", "says"), [
    ((1.0,), {}, "max_records must be an integer >= 1 .*got 1.0: the timeout is poll"),
    ((0,), {}, "max_records must be an integer >= 1"),
    ((True,), {}, "max_records must be an integer >= 1"),
    ((), {"timeout": "soon"}, "timeout must be a number of seconds"),
])
def test_poll_refuses_arguments_of_the_wrong_kind_naming_them(args, kwargs, says):
    consumer = PullConsumer(NOWHERE)  # poll(1.0) once read 1.0 as max_records and crashed
    try:
        with pytest.raises(errors.InvalidArgument, match=says):
            consumer.poll(*args, **kwargs)
    finally:
        consumer.close()
