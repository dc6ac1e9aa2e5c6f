"""Benchmarks for tar2tf: a deterministic realistic dataset, baselines and one runner.

Run ``python -m benchmarks.run --size quick|full``; see ``benchmarks/README.md``.
"""
