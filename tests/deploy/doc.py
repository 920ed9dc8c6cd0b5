"""What docs/deploy.md says, read from the page itself: its code blocks (found by their first
line), the files it has each host write, and its paths moved under a test directory.

The test follows the page through this module, so a change to the page's config files,
certificate commands or client commands is what the test runs; a block it cannot find is an
error naming the block, not a silent fallback.
"""
from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
FENCE = re.compile(r"^( *)```[a-z]*\n(.*?)^\1```", re.S | re.M)
SERVER_DIRS = ("/etc/tubeq", "/var/lib/tubeq")  # what a host's files and data live under


class Page:
    def __init__(self, path: Path = PAGE) -> None:
        self.text = path.read_text()
        self.blocks = [textwrap.dedent(m.group(2)) for m in FENCE.finditer(self.text)]

    def block(self, first: str) -> str:
        """The code block whose first line starts with ``first``."""
        found = [b for b in self.blocks if b.lstrip().startswith(first)]
        if len(found) != 1:
            raise LookupError(f"docs/deploy.md: {len(found)} code blocks start with {first!r}")
        return found[0]

    def master_file(self, n: int) -> str:
        """master``n``'s master.toml: master1's block with the row of the page's table."""
        text = self.block("# master1: /etc/tubeq/master.toml")
        if n == 1:
            return text
        row = re.search(rf"^\| `master{n}` \| `(\"[^`]+\")` \| `(\"[^`]+\")` \|", self.text, re.M)
        if row is None:
            raise LookupError(f"docs/deploy.md: no table row for master{n}")
        text = re.sub(r"^advertised_address = .*$", f"advertised_address = {row[1]}", text,
                      flags=re.M)
        text = re.sub(r"^raft_peers = .*$", f"raft_peers = {row[2]}", text, flags=re.M)
        return text.replace("/master1.", f"/master{n}.")

    def broker_file(self, n: int, address: str) -> str:
        """broker``n``'s broker.toml: broker1's block with its id, address and certificate."""
        text = self.block("# broker1: /etc/tubeq/broker.toml")
        text = re.sub(r"^broker_id = 1$", f"broker_id = {n}", text, flags=re.M)
        text = re.sub(r'^advertised_address = "[^"]*:(\d+)"$',
                      rf'advertised_address = "{address}:\1"', text, flags=re.M)
        return text.replace("/broker1.", f"/broker{n}.")

    def unit_command(self, role: str) -> tuple[list[str], str, dict[str, str]]:
        """(``python -m ROLE`` arguments, EnvironmentFile, Environment) of the page's systemd
        unit for ``role``: the master's block, with what the prose changes for the others (the
        portal's unit has an Environment= line instead of the EnvironmentFile)."""
        unit = self.block("# /etc/systemd/system/tubeq-master.service")
        env_file = re.search(r"^EnvironmentFile=(.*)$", unit, re.M)[1]
        env: dict[str, str] = {}
        start = re.search(r"^ExecStart=(.*)$", unit, re.M)[1]
        if role != "master":  # the page gives the other units' ExecStart in its prose
            start = re.search(rf"`ExecStart=([^`]* -m {role} [^`]*)`", self.text)[1]
        if role == "portal_web":
            env_file, env = "", dict(re.findall(r"`Environment=(\w+)=([^`]*)`", self.text))
        words = shlex.split(start)
        if words[1:3] != ["-m", role]:
            raise LookupError(f"docs/deploy.md: ExecStart is not python -m {role}: {start}")
        return words[3:], env_file, env

    @staticmethod
    def file_of(config: str) -> str:
        """Where a config block goes: the path its first line (``# host: PATH``) names."""
        return config.lstrip().splitlines()[0].split(": ", 1)[1].strip()

    def commands(self, first: str) -> list[str]:
        """The command lines of a bash block, comments dropped."""
        lines = [line.split("  #")[0].strip() for line in self.block(first).splitlines()]
        return [line for line in lines if line and not line.startswith("#")]


def on_host(text: str, root: Path) -> str:
    """``text`` with the servers' directories moved under ``root`` (a host's own tree)."""
    for d in SERVER_DIRS:
        text = text.replace(d, f"{root}{d}")
    return text


def env_file(path: Path) -> dict[str, str]:
    """KEY=value lines, as systemd's EnvironmentFile reads them."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines()
             if "=" in line and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}
