"""The PCR kind of job: its config, unit conversion and record files."""
