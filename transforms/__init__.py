"""Building blocks of tar2tf: sources, tar records, ops, Example encoding, sinks.

Data flows one way through these modules:
``sources`` -> ``tar_records`` -> ``ops`` -> ``example`` -> ``tfrecord`` / ``pcr``.
Each is a plain function or generator; Beam DoFns in ``pipelines`` are thin shells.
"""

__version__ = "0.2.0"
