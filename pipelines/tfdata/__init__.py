"""The original ``Dataset``/``AisDataset`` API (docs/api.md) and what feeds tf.data: datapoints, record parsers,
the streamed in-memory load."""

# a user who imported TensorFlow before tar2tf (as the README does) gets its devices
# initialized here, without the cuInit line of a machine that has no GPU driver
from pipelines.tfdata.tfquiet import quiet_devices as _quiet_devices

_quiet_devices()
