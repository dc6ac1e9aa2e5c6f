"""Which image codec a job's image ops use: ``numpy`` (the default) or ``pillow``
(:mod:`transforms.ops.images` says how they differ).

The codec changes output bytes, so it is part of a job's config
(``ConvertConfig.image_codec``: recorded in the manifest and the work directory's key, and
shipped to every worker with the config).  ``$TAR2TF_IMAGE_CODEC`` only supplies the
default, read where the config is made (the CLI, the Python API): a worker on another
host, whose environment the launcher's does not reach, uses the config's codec.  Kept
apart from the codecs themselves so that making a config imports no image library.
"""

from __future__ import annotations

import os

CODECS = ("numpy", "pillow")
ENV = "TAR2TF_IMAGE_CODEC"


def default_codec() -> str:
    """``$TAR2TF_IMAGE_CODEC`` (not checked here: :func:`checked` says what is wrong with
    it, once), else ``numpy``."""
    return os.environ.get(ENV, "").strip().lower() or "numpy"


def checked(name: str) -> str:
    if name not in CODECS:
        raise ValueError(
            f"image codec must be one of {', '.join(CODECS)}, not {name!r} "
            f"(the option, or ${ENV} for its default)"
        )
    return name
