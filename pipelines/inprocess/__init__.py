"""The in-process driver: the same per-shard work in this process or in its own worker
processes, final shards written in input order."""

#: the most worker processes a job may ask for (``--processes``, ``processes=``): each is a
#: Python interpreter of some 40 MB or more that takes its time to start, so a count far
#: beyond any machine's cores only starts processes that wait (and a typo such as 100000
#: would fork until memory runs out).  A job never starts more than it has input shards.
MAX_PROCESSES = 256
