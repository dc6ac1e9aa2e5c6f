"""The extensions that name an encoded image in a record (``n01/a.jpg`` is an image of the
record ``n01/a``), one list for every place that looks for images by name.

``tar2tf verify`` decodes the features so named, ``tar2tf inspect`` shows them, and
``tar2tf pcr`` takes the first of them a record has, in this order, as its image (JPEG
first: the format PCR keeps losslessly).  Pillow reads each of them.  This module imports
nothing, so that asking costs no Pillow import.
"""

IMAGE_EXTENSIONS = (
    "jpg",
    "jpeg",
    "png",
    "webp",
    "bmp",
    "tif",
    "tiff",
    "gif",
    "ppm",
    "pgm",
    "pbm",
    "pnm",
    "jp2",
)
