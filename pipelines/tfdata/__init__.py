"""The seed API (Dataset, AisDataset) and what feeds tf.data: datapoints, record parsers,
the streamed in-memory load."""
