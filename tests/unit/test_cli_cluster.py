"""``tubeq cluster up``: cluster.json, which scripts poll for and read the moment it appears,
is whole or absent, never seen half written; and stopping stops every child even when nothing
can be printed any more."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from lib.cli import cluster
from lib.cli.cluster import ClusterPlan
from lib.cli.supervisor import Child


def test_cluster_json_appears_whole(tmp_path, monkeypatch):
    plan = ClusterPlan(tmp_path, "127.0.0.1", 1, 1, 0, 0, False, 0)
    children = [Child("master0", tmp_path / "m", [], info={"address": "127.0.0.1:1", "pid": 1}),
                Child("broker1", tmp_path / "b", [], info={"address": "127.0.0.1:2", "pid": 2})]
    written = []
    real_write = Path.write_text

    def write_text(self: Path, data: str, *args, **kwargs) -> int:
        written.append(self.name)
        return real_write(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    cluster._announce(plan, children)
    assert written == ["cluster.json.tmp"]  # never written in place: moved there whole
    summary = json.loads((tmp_path / "cluster.json").read_text())
    assert summary["masters"] == "127.0.0.1:1" and summary["broker1"]["pid"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json"]




def test_stopping_survives_a_closed_stderr_and_stops_every_child(tmp_path, monkeypatch):
    plan = ClusterPlan(tmp_path, "127.0.0.1", 1, 1, 0, 0, False, 0)
    child = Child("broker1", tmp_path / "b", [])
    child.popen = subprocess.Popen(["sleep", "60"])
    try:
        def broken_pipe(*args, **kwargs):
            raise BrokenPipeError(32, "Broken pipe")

        monkeypatch.setattr(cluster.click, "echo", broken_pipe)
        cluster.stop_all(plan, [child])
        assert child.popen.poll() is not None  # stopped although nothing could be printed
    finally:
        if child.popen.poll() is None:
            child.popen.kill()
            child.popen.wait()


def test_cluster_up_finds_the_portal_to_start():
    """It once looked for portal_web/ under lib/ and silently started no portal."""
    from lib.cli.cluster import portal_available

    assert portal_available()
