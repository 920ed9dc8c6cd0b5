"""lib/open_files.py: the broker raises its open-file limit toward open_files_limit (a topic
costs it two descriptors and more), never lowers it, and says what it got. Each case runs in
a child process: a process's limits are its own."""
from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child(code: str) -> list[int]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, check=True)
    return [int(x) for x in done.stdout.split()]


def test_the_soft_limit_rises_toward_what_is_wanted_and_never_falls():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    got = child(f"""
import resource
from lib.open_files import raise_open_files
resource.setrlimit(resource.RLIMIT_NOFILE, (300, {hard}))
print(*raise_open_files(400), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
print(*raise_open_files(350))
""")
    assert got == [400, 300, 400, 400, 400], "raised to 400, then left alone"


def test_past_the_hard_limit_only_with_the_privilege():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return  # nothing is past it
    want = hard + 1000
    privileged = child(f"""
import resource
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, ({want}, {want}))
    print(1)
except (ValueError, OSError):
    print(0)
""")[0]  # root is not enough: a container may lack CAP_SYS_RESOURCE
    got = child(f"""
import resource
from lib.open_files import raise_open_files
print(raise_open_files({want})[0], *resource.getrlimit(resource.RLIMIT_NOFILE))
""")
    assert got == ([want] * 3 if privileged else [hard] * 3)
