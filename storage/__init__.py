"""Storage instances: data log, per-partition index, memory cache blocks, offsets."""
