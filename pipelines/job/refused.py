"""A job's refusal to start over outputs that exist, worded in its caller's terms.

The job layer knows why it refuses (outputs exist, or an interrupted run had other
options) and which option would change its mind (overwrite, resume), but not how its
caller spells them: the Python API takes ``overwrite=True``, the CLI ``--overwrite``.  A
refusal's message names them as :class:`Option` parts, spelt when it is shown: in the
API's keywords unless the caller rewords it (:meth:`Refusal.worded`, which
``launch.cmd_convert`` and ``launch.cmd_pcr`` call with ``launch.args.CLI_WORDS``).
"""

from __future__ import annotations

from typing import Dict, Union

API_WORDS = {"overwrite": "overwrite=True", "resume": "resume=True"}


class Option(str):
    """An option named in a refusal's message (its value: the option's neutral name)."""


OVERWRITE, RESUME = Option("overwrite"), Option("resume")


class Refusal(Exception):
    """A message of text and :class:`Option` parts, spelt by ``words``."""

    def __init__(self, *parts: Union[str, Option]):
        self.parts = parts
        self.words: Dict[str, str] = dict(API_WORDS)
        super().__init__(str(self))

    def worded(self, words: Dict[str, str]) -> "Refusal":
        """The same refusal, its options spelt as ``words`` says."""
        self.words = dict(words)
        self.args = (str(self),)
        return self

    def __str__(self) -> str:
        return "".join(self.words[p] if isinstance(p, Option) else p for p in self.parts)


class OutputExistsError(Refusal, RuntimeError):
    """Outputs exist, and the job was not asked to replace them (or cannot resume them):
    the one class a caller catches for every such refusal (exit 4 on the CLI); the output
    lock's :class:`~pipelines.job.output_lock.OutputLockedError` is one of its cases."""


class ResumeConflict(Refusal, ValueError):
    """``resume`` was asked for, but the interrupted run of these inputs had other options."""
