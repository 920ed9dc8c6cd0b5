"""Read planning as pure decisions: options + topic descriptions -> offset ranges (no Spark)."""
from __future__ import annotations

import pytest

from lib.types import PartitionInfo, TopicInfo
from spark_sink.options import OptionError, read_options
from spark_sink.plan import OffsetRange, offset_ranges, split_ranges


def topic(name: str, *offsets: tuple[int, int]) -> TopicInfo:
    parts = [PartitionInfo(p, 1, "127.0.0.1:1", True, e, latest)
             for p, (e, latest) in enumerate(offsets)]
    return TopicInfo(name, len(parts), 1, "async", 0, 0, 1 << 20, partitions=parts)


def test_json_offsets_resolve_minus_two_and_minus_one_and_default_the_rest():
    opts = read_options({"masters": "h:1", "subscribe": "a",
                         "startingOffsets": '{"a": {"0": 3, "1": -2}}',
                         "endingOffsets": '{"a": {"1": -1, "2": 8}}'})
    ranges = offset_ranges(opts, {"a": topic("a", (0, 10), (2, 5), (1, 9))})
    assert ranges == [OffsetRange("a", 0, 3, 10), OffsetRange("a", 1, 2, 5),
                      OffsetRange("a", 2, 1, 8)]


def test_a_start_below_earliest_is_data_loss_unless_allowed():
    spec = {"masters": "h:1", "subscribe": "a", "startingOffsets": '{"a": {"0": 1}}'}
    with pytest.raises(OptionError, match="earliest offset is 4 .* failOnDataLoss=false"):
        offset_ranges(read_options(spec), {"a": topic("a", (4, 9))})
    lenient = read_options({**spec, "failOnDataLoss": "false"})
    assert offset_ranges(lenient, {"a": topic("a", (4, 9))}) == [OffsetRange("a", 0, 4, 9)]


def test_offsets_for_a_topic_not_read_are_refused():
    opts = read_options({"masters": "h:1", "subscribe": "a", "endingOffsets": '{"b": {"0": 1}}'})
    with pytest.raises(OptionError, match="endingOffsets.*topic 'b'.*reading: a"):
        offset_ranges(opts, {"a": topic("a", (0, 1))})


def test_min_partitions_splits_ranges_in_proportion_to_their_size_without_gaps():
    ranges = [OffsetRange("a", 0, 0, 900), OffsetRange("a", 1, 50, 150)]
    split = split_ranges(ranges, 10)
    assert len([r for r in split if r.partition == 0]) == 9
    assert len([r for r in split if r.partition == 1]) == 1
    for p, (start, end) in ((0, (0, 900)), (1, (50, 150))):
        mine = [r for r in split if r.partition == p]
        assert mine[0].start == start and mine[-1].end == end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))
    assert split_ranges(ranges, 2) == ranges
    assert split_ranges([OffsetRange("a", 0, 0, 3)], 10) == [
        OffsetRange("a", 0, i, i + 1) for i in range(3)]


def test_batch_bytes_above_the_producers_limit_is_refused_at_planning_naming_the_option():
    from lib.producer.producer import MAX_BATCH_BYTES, ProducerConfig
    from spark_sink.options import write_options

    base = {"masters": "h:1", "topic": "a"}
    assert write_options(base).batch_bytes == ProducerConfig().batch_bytes
    assert write_options({**base, "batchBytes": str(MAX_BATCH_BYTES)}).batch_bytes \
        == MAX_BATCH_BYTES
    with pytest.raises(OptionError, match=f"batchBytes.*<= {MAX_BATCH_BYTES}, got"):
        write_options({**base, "batchBytes": str(MAX_BATCH_BYTES + 1)})


def test_isolation_level_is_checked_and_kafkas_name_points_to_ours():
    base = {"masters": "h:1", "subscribe": "a"}
    assert read_options(base).isolation_level == "read_uncommitted"
    assert read_options({**base, "isolationLevel": "read_committed"}).isolation_level == \
        "read_committed"
    with pytest.raises(OptionError, match="isolationLevel.*read_uncommitted or read_committed"):
        read_options({**base, "isolationLevel": "serializable"})
    with pytest.raises(OptionError, match="kafka.isolation.level.*'isolationLevel'"):
        read_options({**base, "kafka.isolation.level": "read_committed"})
