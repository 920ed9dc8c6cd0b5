from broker.metrics import BrokerMetrics, PartitionCounters


def test_in_and_out_are_counted_per_partition_and_per_topic():
    m = BrokerMetrics()
    m.produced("t", 0, 100, 2)
    m.produced("t", 0, 50, 1)
    m.produced("t", 1, 10, 1)
    m.served("t", 0, 70, 3)
    m.served("t", 1, 0, 0)  # an empty fetch counts nothing
    assert m.partition("t", 0) == PartitionCounters(150, 3, 70, 3)
    assert m.partition("t", 1) == PartitionCounters(10, 1, 0, 0)
    assert m.partition("u", 0) == PartitionCounters()
    m.produced("u", 0, 5, 1)
    sample = m.registry.get_sample_value  # the per-topic series: sums of its partitions
    assert sample("tubeq_broker_bytes_in_total", {"topic": "t"}) == 160
    assert sample("tubeq_broker_messages_in_total", {"topic": "t"}) == 4
    assert sample("tubeq_broker_bytes_out_total", {"topic": "t"}) == 70
    assert sample("tubeq_broker_messages_out_total", {"topic": "t"}) == 3
    assert sample("tubeq_broker_bytes_in_total", {"topic": "u"}) == 5
    assert sample("tubeq_broker_messages_out_total", {"topic": "u"}) == 0
