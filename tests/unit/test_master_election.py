"""Leader failover decisions: the first live in-sync replica, the next epoch, live ISR only."""
from __future__ import annotations

from master.election import elections


def topic(placement, replicas, isr, epochs, topic_id=5, unclean=False):
    return {"topic_id": topic_id, "placement": placement, "replicas": replicas, "isr": isr,
            "leader_epochs": epochs, "settings": {"unclean_leader_election": unclean}}


def test_a_dead_leader_is_replaced_by_the_first_live_in_sync_replica():
    topics = {"t": topic([1, 2, 3], [[1, 2, 3], [2, 3, 1], [3, 1, 2]],
                         [[1, 2, 3], [2, 3, 1], [3, 1]], [4, 1, 7])}
    assert elections(topics, alive=[2, 3]) == [
        {"topic": "t", "topic_id": 5, "partition": 0, "leader": 2, "from_leader": 1,
         "from_epoch": 4, "leader_epoch": 5, "isr": [2, 3]}]
    assert elections(topics, alive=[1, 2, 3]) == []


def test_only_in_sync_replicas_may_lead_and_offline_partitions_wait():
    topics = {"t": topic([1, 1], [[1, 2, 3], [1, 2]], [[1, 3], [1]], [2, 2])}
    got = elections(topics, alive=[2, 3])
    assert [(c["partition"], c["leader"], c["isr"]) for c in got] == [(0, 3, [3])], \
        "2 is alive but out of sync; partition 1 has no live in-sync replica"


def test_single_copy_partitions_are_left_alone():
    assert elections({"t": topic([1], [[1]], [[1]], [0])}, alive=[2]) == []


def test_partition_health_counts_under_replicated_and_offline_partitions():
    from master.election import partition_health
    topics = {"a": topic([1, 2, 3], [[1, 2], [2, 3], [3, 1]], [[1, 2], [2], [3]], [1, 1, 1]),
              "b": topic([4], [[4]], [[4]], [0])}
    assert partition_health(topics, alive=[1, 2, 3]) == (2, 1)
    assert partition_health(topics, alive=[1, 2, 3, 4]) == (2, 0)


def test_a_broker_stopping_cleanly_gives_up_its_leaderships_and_isr_places():
    from master.election import handoff
    topics = {"t": topic([1, 2, 1], [[1, 2], [2, 1], [1, 3]], [[1, 2], [2, 1], [1]],
                         [3, 1, 1])}
    changes = handoff(topics, 1, alive=[1, 2, 3])
    assert [(c["partition"], c["leader"], c["leader_epoch"], c["isr"]) for c in changes] == [
        (0, 2, 4, [2]),  # led by 1: moves, next epoch
        (1, 2, 1, [2]),  # followed by 1: it leaves the ISR, same leader and epoch
    ], "partition 2 has no other in-sync replica: it stays with broker 1"


def test_an_unclean_election_needs_the_topics_consent_and_the_controllers():
    def of(unclean):
        return {"t": topic([1, 1], [[1, 2, 3], [1, 3]], [[1], [1, 3]], [6, 2], unclean=unclean)}
    assert elections(of(True), alive=[2, 3], allow_unclean=True) == [
        {"topic": "t", "topic_id": 5, "partition": 0, "leader": 2, "from_leader": 1,
         "from_epoch": 6, "leader_epoch": 7, "isr": [2], "unclean": True},
        {"topic": "t", "topic_id": 5, "partition": 1, "leader": 3, "from_leader": 1,
         "from_epoch": 2, "leader_epoch": 3, "isr": [3]}], \
        "partition 0 has no live in-sync replica: 2 leads alone; partition 1 is clean"
    assert [c["partition"] for c in elections(of(True), alive=[2, 3], allow_unclean=False)] \
        == [1], "a clean shutdown's handoff never elects out of sync"
    assert [c["partition"] for c in elections(of(False), alive=[2, 3], allow_unclean=True)] \
        == [1], "the topic did not allow it"
