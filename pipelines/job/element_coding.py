"""Values that cross Beam's coders with text that is not valid UTF-8.

A tar member name is bytes; :mod:`transforms.tar.reader` decodes it as UTF-8 with
``surrogateescape``, so a legacy Latin-1 name or a pax ``hdrcharset=BINARY`` path keeps
its exact bytes as lone surrogates (byte ``0xE9`` -> ``U+DCE9``) and
``key.encode("utf-8", "surrogateescape")`` gives them back.  Such keys live in a piece's
description (its keys, its rejects' keys and reasons) and in the manifest.  Beam's default
coder encodes a ``str`` as strict UTF-8 and fails on them, so these dicts travel as
:class:`Pickled`: the coder sends a type it does not know through its pickling fallback,
and pickle keeps lone surrogates.  Objects of other classes (a TFRecord piece's
``PieceSummary``) take that fallback as they are.  Nothing written to the outputs depends
on the coder.
"""

from __future__ import annotations


class Pickled(dict):
    """A dict that Beam's default coder pickles as a whole instead of encoding each field
    (its ``str`` fields may hold surrogate-escaped bytes)."""

    def __reduce__(self):
        return Pickled, (dict(self),)


def carried(value):
    """``value`` as it crosses a Beam step: a dict as :class:`Pickled`; an object of
    another class as it is (the coder pickles what it does not know)."""
    return Pickled(value) if isinstance(value, dict) else value
