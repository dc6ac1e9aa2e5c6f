"""The in-process driver: the same per-shard work in this process or in its own worker
processes, final shards written in input order."""

#: the bytes of one piece's frames a converting thread (the driver's, or a placing worker
#: process's) holds in memory for the shard stream before it spills them to the piece's
#: file: held memory stays bounded by (threads + pieces waiting for their turn) x this
HOLD_BYTES = 32 << 20
