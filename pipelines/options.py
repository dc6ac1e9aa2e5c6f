"""Beam pipeline options with an offline, fast local default.

With no ``--runner``, tar2tf runs on Beam's FnApiRunner in ``multi_threading`` mode with
one worker thread per core.  Beam's ``DirectRunner`` would first try to download the Prism
binary (no network here, and a stall risk on networks that drop packets); FnApiRunner is
the engine DirectRunner falls back to anyway.  Threads beat processes for this work on
small machines because Pillow, zlib and the CRC code release the GIL.
"""

from __future__ import annotations

import os
from typing import List, Optional, Sequence

LOCAL_DEFAULTS = ["--runner=FnApiRunner", "--direct_running_mode=multi_threading"]


def _has(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def effective_args(beam_args: Optional[Sequence[str]] = None) -> List[str]:
    args = list(beam_args or [])
    if not _has(args, "--runner"):
        args = LOCAL_DEFAULTS + args
    runner = runner_name(args)
    if runner in ("FnApiRunner", "DirectRunner") and not _has(args, "--direct_num_workers"):
        args.append(f"--direct_num_workers={os.cpu_count() or 1}")
    return args


def runner_name(args: Sequence[str]) -> str:
    name = "DirectRunner"
    for i, a in enumerate(args):
        if a.startswith("--runner="):
            name = a.split("=", 1)[1]
        elif a == "--runner" and i + 1 < len(args):
            name = args[i + 1]
    return name


def is_local(args: Sequence[str]) -> bool:
    return runner_name(args) in ("FnApiRunner", "DirectRunner", "BundleBasedDirectRunner",
                                 "SwitchingDirectRunner")


def _value(args: Sequence[str], flag: str) -> Optional[str]:
    val = None
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            val = a.split("=", 1)[1]
        elif a == flag and i + 1 < len(args):
            val = args[i + 1]
    return val


def shows_progress(args: Sequence[str]) -> bool:
    """True when DoFns run inside this process, so the live bar can see them: the local
    runner in ``in_memory``/``multi_threading`` mode, or any portable runner (Flink) with
    ``--environment_type=LOOPBACK``.  ``multi_processing`` workers are other processes."""
    if is_local(args):
        return _value(args, "--direct_running_mode") != "multi_processing"
    return (_value(args, "--environment_type") or "").upper() == "LOOPBACK"


def make_pipeline_options(beam_args: Optional[Sequence[str]] = None):
    from apache_beam.options.pipeline_options import PipelineOptions
    return PipelineOptions(effective_args(beam_args))
