"""The largest image a decode accepts, in pixels (``--max-image-pixels``).

Checked from the image header, before any pixel is decoded (Pillow's ``Image.open`` reads
only the header): a 100-megapixel JPEG decodes to ~300 MB of RGB, and Pillow's own guard
only warns from 89 Mpx and refuses from 179 Mpx.  An image over the limit is an ``op``
reject naming its size.  The limit is per process: set by the job's configuration where
its stages are built (every worker builds them), read by :mod:`transforms.ops.images`.  This
module imports nothing, so that setting it costs a passthrough worker no Pillow import.
"""

DEFAULT_MAX_IMAGE_PIXELS = 64_000_000

max_pixels = DEFAULT_MAX_IMAGE_PIXELS


def set_max_pixels(n) -> None:
    global max_pixels
    n = DEFAULT_MAX_IMAGE_PIXELS if n is None else int(n)
    if n <= 0:
        raise ValueError(f"max_image_pixels must be positive, not {n}")
    max_pixels = n
