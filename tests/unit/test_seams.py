"""Modules meet through public names only: no module reads or sets another object's
``_private`` attribute (as storage's flusher once did with fifteen of the store's, and the
replica fetcher's leader loops with their owner's). The store and its flusher share a
StoreCore (storage/core.py); each partition's log is a PartitionLog with public methods.
Checked on the source, so a new reach-in fails here rather than in a reader's head; the few
deliberate exceptions are listed with their reason."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORAGE = ROOT / "storage"
PACKAGES = ("lib", "storage", "broker", "master", "portal_web", "spark_sink", "load")
# (file, attribute) -> why it may reach in
ALLOWED = {
    ("*", "_replace"): "NamedTuple's public API has a leading underscore",
    ("*", "_exit"): "os._exit: leaving at once, as a crash would",
    ("master/raft.py", "*"): "the one module that owns pysyncobj adapts its internals",
    ("spark_sink/pipelines/local.py", "*"): "PySpark's session and gateway internals",
    ("lib/producer/futures.py", "_waiter_list"): "concurrent.futures' waiters (as_completed, "
                                                 "wait) of a future finished in bulk",
    ("lib/producer/futures.py", "_invoke_callbacks"): "the same, for its callbacks",
    ("lib/producer/accumulator.py", "_outcome"): "RecordFuture built without __init__ on "
                                                 "send()'s path (40 of its 120 ns)",
    ("lib/producer/accumulator.py", "_index"): "the same",
}


def _allowed(name: str, attr: str) -> bool:
    return any(key in ALLOWED for key in ((name, attr), ("*", attr), (name, "*")))


def _reach_ins(path: Path) -> list[str]:
    """``thing._name`` where ``thing`` is not ``self`` or ``cls``: another object's privates."""
    name, found = str(path.relative_to(ROOT)), []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
                and not _allowed(name, node.attr)):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_touches_another_objects_private_attributes():
    paths = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
             if "proto" not in p.parts]
    wrong = {str(p.relative_to(ROOT)): hits for p in paths if (hits := _reach_ins(p))}
    assert not wrong, ("modules reach into other objects' private attributes "
                       f"(share them through a public name instead): {wrong}")


def test_the_flusher_knows_the_store_only_through_its_core():
    tree = ast.parse((STORAGE / "flusher.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "storage.store" not in imported, "flusher.py imports storage.store: an import cycle"
