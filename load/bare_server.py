"""A ceiling's bare server as a process of its own, in a broker's place (the benchmarks'
``*_ceiling`` modules), found through its ready file and stopped by its PID."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from lib.process import clear_ready, wait_ready


class BareServer:
    """``python -m <module> --dir <root> <args>``; its address once it is ready."""

    def __init__(self, module: str, root: Path, *args: str) -> None:
        root.mkdir(parents=True, exist_ok=True)
        clear_ready(root)
        self.proc = subprocess.Popen([sys.executable, "-m", module, "--dir", str(root), *args],
                                     cwd=Path(__file__).resolve().parents[1])
        try:
            info = wait_ready(root, self.proc.pid, alive=lambda: self.proc.poll() is None)
        except BaseException:
            self.stop()
            raise
        self.address = info["address"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
