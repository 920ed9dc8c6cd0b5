"""Wire protocol: .proto files and the stubs generated from them (committed; see generate.py)."""
