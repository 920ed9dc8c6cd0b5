"""The committed gRPC stubs must match the .proto files."""
from __future__ import annotations

from lib.proto.generate import PROTOS, ROOT, generate


def test_committed_stubs_are_not_stale(tmp_path):
    generate(tmp_path)
    assert PROTOS, "no .proto files found"
    for proto in PROTOS:
        stem = proto[: -len(".proto")]
        for suffix in ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi"):
            fresh = (tmp_path / (stem + suffix)).read_text()
            committed = (ROOT / (stem + suffix)).read_text()
            assert committed == fresh, f"{stem}{suffix} is stale: run `make proto`"
