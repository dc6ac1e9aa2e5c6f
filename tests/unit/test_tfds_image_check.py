"""``--tfds-image``'s check (``transforms.ops.images.check_tfds_image``) against what TFDS
does with the same bytes: an ``Image(shape=(None, None, channels))`` feature runs
``tf.image.decode_image(data, channels)`` on every record it reads, and a record is usable
only if that gives one ``H x W x channels`` image.  The check must pass exactly those."""

from __future__ import annotations

import pytest
from support import tfds_images

from transforms.ops import images
from transforms.ops.image_check import TfdsImage
from transforms.ops.stages import Stages
from transforms.record_types import KEY, SHARD, is_reject

CASES = tfds_images.cases()


def tfds_decodes(data: bytes, channels: int) -> bool:
    import tensorflow as tf

    try:
        return len(tf.image.decode_image(data, channels=channels, dtype=tf.uint8).shape) == 3
    except (tf.errors.InvalidArgumentError, ValueError):
        return False


@pytest.mark.parametrize("channels", (1, 3, 4))
@pytest.mark.parametrize("name", sorted(CASES))
def test_check_passes_what_tfds_decodes(name, channels):
    data = CASES[name]
    try:
        images.check_tfds_image(data, channels)
        passed, why = True, ""
    except images.ImageError as e:
        passed, why = False, str(e)
    assert passed == tfds_decodes(data, channels), (name, channels, why)
    if name in tfds_images.NEVER:
        assert not passed


def test_an_image_over_the_pixel_bound_is_rejected(monkeypatch):
    """The job's ``--max-image-pixels`` holds here too, from the header: TF would decode
    such an image (even one whose header alone claims the size: its missing data is only a
    warning to libjpeg), at whatever memory it takes."""
    from transforms.ops import image_limits

    data = CASES["jpeg-RGB"]  # 40 x 30
    images.check_tfds_image(data, 3)
    monkeypatch.setattr(image_limits, "max_pixels", 40 * 30 - 1)
    with pytest.raises(images.ImageError, match="40x30 = 1200 pixels > max-image-pixels 1199"):
        images.check_tfds_image(data, 3)


def test_the_stage_rejects_a_record_and_keeps_a_good_one_unchanged():
    """As the job's last sample stage: an ``op`` reject naming the feature and why; a good
    record passes as it is; a record without the entry passes (the metadata step refuses
    such a feature for the whole job)."""
    stages = Stages((TfdsImage("jpg"),))
    good = {KEY: "a", SHARD: "s.tar", "jpg": CASES["jpeg-RGB"], "cls": b"1"}
    assert stages.run_samples(dict(good)) == good
    assert stages.run_samples({KEY: "n", SHARD: "s.tar", "cls": b"1"})["cls"] == b"1"
    bad = stages.run_samples({KEY: "b", SHARD: "s.tar", "jpg": CASES["gif"]})
    assert is_reject(bad) and bad.stage == "op" and bad.key == "b"
    assert bad.reason.startswith(
        "TfdsImage('jpg') failed: ImageError: unsupported image format GIF"
    )
    four = Stages((TfdsImage("jpg", 4),)).run_samples({KEY: "c", "jpg": CASES["jpeg-RGB"]})
    assert is_reject(four) and "TfdsImage('jpg', 4) failed" in four.reason
    assert "not 4" in four.reason
