"""The parts of a store meet through public names only: the store and its flusher share a
StoreCore (storage/core.py), each partition's log is a PartitionLog with public methods, and
no storage module reads or sets another object's ``_private`` attribute (as the flusher once
did with fifteen of the store's). Checked on the source, so a new reach-in fails here rather
than in a reader's head."""
from __future__ import annotations

import ast
from pathlib import Path

STORAGE = Path(__file__).resolve().parents[2] / "storage"


def _reach_ins(path: Path) -> list[str]:
    """``thing._name`` where ``thing`` is not ``self`` or ``cls``: another object's privates."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_storage_module_touches_another_objects_private_attributes():
    wrong = {path.name: hits for path in sorted(STORAGE.glob("*.py")) if (hits := _reach_ins(path))}
    assert not wrong, ("storage modules reach into other objects' private attributes "
                       f"(share them through a public name instead): {wrong}")


def test_the_flusher_knows_the_store_only_through_its_core():
    tree = ast.parse((STORAGE / "flusher.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "storage.store" not in imported, "flusher.py imports storage.store: an import cycle"
