"""TopicDirs alone, on a temp dir: a topic's directory belongs to one incarnation (claimed,
erased only by its own topic_id), a store opens with the leftover copies of its partitions, and
removing a store's last copy deletes it and its checkpoint."""
from __future__ import annotations

import json

import pytest

from broker.topic_dirs import TOPIC_FILE, Leaving, TopicDirs
from storage.checkpoints import entry_key
from storage.config import StoreConfig
from tests.helpers import batch_of

SMALL = StoreConfig(cache_flush_interval_ms=10)


@pytest.fixture
def dirs(tmp_path):
    d = TopicDirs(tmp_path, SMALL)
    yield d
    d.close()


def test_a_claim_erases_an_older_incarnation_and_an_erase_only_its_own(dirs):
    assert dirs.claim("t", 1) is False  # nothing there yet
    (dirs.root / "t" / "old-data").write_bytes(b"x")
    assert json.loads((dirs.root / "t" / TOPIC_FILE).read_text())["topic_id"] == 1
    assert dirs.claim("t", 1) is False and (dirs.root / "t" / "old-data").exists()
    assert dirs.claim("t", 2) is True, "topic_id 1's data is stale once 2 claims the directory"
    assert not (dirs.root / "t" / "old-data").exists()
    assert dirs.erase("t", 1) is False and (dirs.root / "t").is_dir()
    assert dirs.erase("t", 2) is True and not (dirs.root / "t").exists()
    assert dirs.erase("../escape", 2) is False  # a bad name has no directory


def test_a_store_opens_with_leftover_copies_runs_the_checks_and_goes_with_its_last_copy(dirs):
    checked = []
    dirs.on_store_opened(lambda topic, store: checked.append((topic, store.store_id)))
    dirs.claim("t", 1)
    store = dirs.open_store("t", 1, 0, [0, 2], 2, SMALL)
    store.append(2, batch_of([b"a"]))
    store.close()
    reopened = dirs.open_store("t", 1, 0, [0], 2, SMALL)  # p2 was moved away meanwhile
    assert sorted(reopened.partitions) == [0, 2] and checked == [("t", 0), ("t", 0)]
    assert dirs.checkpoints.get(entry_key("t", 1, 0)) is not None  # written when it closed
    removed = dirs.remove([Leaving("t", 1, reopened, (0, 2), whole=True)])
    assert removed == [("t", 0), ("t", 2)]
    assert not reopened.dir.exists()
    assert dirs.checkpoints.get(entry_key("t", 1, 0)) is None
