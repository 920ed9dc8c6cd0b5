"""The floors of DESIGN.md's layout import only downwards: lib imports nothing of ours,
storage only lib, broker lib and storage, master / portal_web / spark_sink lib. Checked on
the source (every import statement, lazy ones inside functions too), so an exception cannot
hide in a function body, as ``tubeq spark`` / ``tubeq load`` once did in lib/cli."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = {"lib", "storage", "broker", "master", "portal_web", "spark_sink", "load", "tests"}
MAY_IMPORT = {
    "lib": set(),
    "storage": {"lib"},
    "broker": {"lib", "storage"},
    "master": {"lib"},
    "portal_web": {"lib"},
    "spark_sink": {"lib"},
}


def _imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & OURS


def _private_imports(path: Path) -> list[str]:
    """``from <one of ours> import _name``: a module leaning on another's private parts."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and node.module.split(".")[0] in OURS):
            found += [f"{node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_imports_a_private_name_of_another():
    wrong = {str(path.relative_to(ROOT)): names
             for package in sorted(OURS) for path in sorted((ROOT / package).rglob("*.py"))
             if (names := _private_imports(path))}
    assert not wrong, f"private names imported across modules (make them public): {wrong}"


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_the_floors_below_it(package):
    wrong = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imported_packages(path) - MAY_IMPORT[package] - {package}
        if bad:
            wrong[str(path.relative_to(ROOT))] = sorted(bad)
    assert not wrong, f"{package} may import only {sorted(MAY_IMPORT[package])}: {wrong}"


def test_the_cli_finds_the_command_groups_of_the_floors_above_lib():
    import click

    from lib.cli.main import main

    assert {"spark", "load"} <= set(main.list_commands(click.Context(main))), \
        "tubeq spark / tubeq load come through the tubeq.commands entry point: reinstall"


def test_a_command_group_that_fails_to_load_says_why_and_leaves_the_rest(monkeypatch):
    import importlib

    from click.testing import CliRunner

    cli_main = importlib.import_module("lib.cli.main")  # the module, not the group it exports

    class Broken:
        name = "spark"

        def load(self):
            raise ImportError("No module named 'pyspark'")

    monkeypatch.setattr(cli_main, "entry_points", lambda group, name=None: [Broken()])
    group = cli_main.TubeqGroup("tubeq")
    result = CliRunner().invoke(group, ["spark", "feed"])
    assert result.exit_code == 1
    assert "tubeq spark is unavailable: ImportError: No module named 'pyspark'" in result.output


def test_a_command_of_lib_loads_neither_the_plugins_nor_numpy():
    # every tubeq command pays for what lib.cli imports: Spark's and Locust's command groups
    # (~0.35 s) load only when named or listed, numpy only in the benchmarks that use it
    probe = ("import sys\n"
             "from lib.cli.main import main\n"
             "main(['topic', 'create', '--help'], standalone_mode=False)\n"
             "heavy = ('numpy', 'spark_sink.cli', 'load.cli')\n"
             "print(sorted(m for m in heavy if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"
