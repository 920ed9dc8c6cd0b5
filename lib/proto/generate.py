"""Regenerate the committed gRPC stubs: ``python -m lib.proto.generate [--out DIR]``.

Stubs are committed so that installing tubeq needs no code generation; a test regenerates
them into a temp dir and fails when the committed ones are stale.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "lib" / "proto").glob("*.proto"))


def generate(out: Path) -> None:
    from grpc_tools import protoc  # build-time dependency only

    out.mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"-I{ROOT}", f"--python_out={out}", f"--grpc_python_out={out}",
            f"--pyi_out={out}", *PROTOS]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT, help="output root (default: repo)")
    generate(parser.parse_args().out)


if __name__ == "__main__":
    sys.exit(main())
