"""A Flink standalone session cluster on this machine, for running tar2tf's Beam jobs on
separate worker processes: one JobManager and N TaskManagers (each its own JVM), plus a
Beam Python worker pool they share, all on loopback.  ``launch/flink-cluster.sh`` is its
CLI (``python -m launch.flink``).

By layer, each importing only the ones above it:

* :mod:`launch.flink.procs`: process supervision (state file, start in a session of its
  own, PID checks, waiting, stopping by PID); nothing about Flink or Beam;
* :mod:`launch.flink.jvm`: Flink's configuration, the JobManager and TaskManager JVMs, REST;
* :mod:`launch.flink.worker_pool`: the shared Beam worker pool service (runs in the pool's
  own process); :mod:`launch.flink.pool` starts it and checks its python first;
* :mod:`launch.flink.cluster`: the cluster as a whole (start, add a TaskManager, status,
  stop);
* ``launch/flink/__main__.py``: the command line.
"""
