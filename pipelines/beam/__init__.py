"""The Beam graphs (TFRecord, PCR, shuffle): the same graph on every runner, its DoFns doing the work themselves."""
