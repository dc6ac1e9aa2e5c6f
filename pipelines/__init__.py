"""Beam pipelines and the user-facing Python API of tar2tf."""
