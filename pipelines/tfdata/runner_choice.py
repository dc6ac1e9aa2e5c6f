"""Where a load's ops run: Beam workers of the configured runner, or this process (its
threads for a streamed load, the in-process driver for a written one).

The rule is the table of ``remote_exec`` in :mod:`pipelines.tfdata.dataset`.  Ops go to
Beam only if they can be pickled; when one cannot, the load runs here, with a warning
saying why.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Iterable, Optional, Sequence

from pipelines.beam import options as opts
from transforms.ops import walk
from transforms.ops.stages import stage_name

log = logging.getLogger("tar2tf")


def unshippable(things: Iterable[Any]) -> Optional[str]:
    """Why one of the stages or ops cannot be pickled for Beam workers, or None if all can."""
    from apache_beam.internal import pickler

    for thing in things:
        for part in list(walk(thing)) or [thing]:
            try:
                pickler.dumps(part)
            except Exception as e:
                return f"{stage_name(part)} cannot be pickled ({e.__class__.__name__}: {e})"
    return None


def use_beam(
    mode: Optional[bool],
    beam_args: Sequence[str],
    why_not: Callable[[], Optional[str]],
    *,
    in_memory: bool = False,
    shuffle: bool = False,
) -> bool:
    """Whether a load runs as a Beam job.  ``mode``: ``remote_exec`` (True, False or None);
    ``why_not()``: :func:`unshippable` of the load's stages, asked only if Beam is chosen;
    ``in_memory``: a load without ``path``; ``shuffle``: a written load that shuffles."""
    if mode is False:
        return False
    if opts.names_in_process(beam_args):
        rest = opts.beam_only(beam_args)
        conflict = (
            f"takes no Beam options ({' '.join(rest)})"
            if rest
            else "cannot shuffle (a Beam graph step)"
            if shuffle
            else "is not Beam (remote_exec=True)"
            if mode is True
            else None
        )
        if conflict:
            raise ValueError(
                f"beam_args name --runner={opts.runner_name(beam_args)}, the in-process "
                f"driver, which {conflict}"
            )
        return False
    if mode is None:
        if in_memory:
            if opts.is_local(opts.effective_args(beam_args)):
                return False
        elif opts.in_process(beam_args, shuffle):
            # as TFDS builds with its plain writer unless given Beam options: the
            # in-process driver is the fastest on one machine, and writes the same bytes
            return False
    why = why_not()
    if why is not None:
        warnings.warn(
            f"tar2tf: running the ops in this process, not on Beam workers: {why}",
            RuntimeWarning,
            stacklevel=3,
        )
        log.warning("remote execution disabled: %s", why)
        return False
    return True
