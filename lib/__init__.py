"""tubeq client library and shared protocol code (imports nothing else of ours)."""
