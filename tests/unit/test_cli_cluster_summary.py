"""``tubeq cluster up`` announces its children in cluster.json, which scripts poll for and read
the moment it appears: the file must be whole or absent, never seen half written."""
from __future__ import annotations

import json
from pathlib import Path

from lib.cli import cluster
from lib.cli.cluster import Child, ClusterPlan


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


