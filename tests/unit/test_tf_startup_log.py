"""Which lines ``tfquiet.quiet_import`` drops from TensorFlow's stderr: its start-up log
(absl's banner, INFO and WARNING lines, the CPU-features message), and the cuInit line
only without a GPU driver; an error, or anything else, is kept."""

from __future__ import annotations

import pytest

from pipelines.tfdata.tfquiet import startup_noise

NOISE = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    b"I0000 00:00:1796205096.526812   22993 port.cc:153] oneDNN custom operations are on.\n",
    b"I0000 00:00:1796205096.531481   22993 cudart_stub.cc:31] Could not find cuda drivers\n",
    b"W0000 00:00:1796205096.6 22993 cpu_feature_guard.cc:227] This TensorFlow binary is\n",
    b"To enable the following instructions: AVX2 FMA, in other operations, rebuild ...\n",
]
KEPT = [
    b"E0000 00:00:1796205096.6 22993 op_kernel.cc:1] Out of memory\n",
    b"Traceback (most recent call last):\n",
    b"UserWarning: something the user should see\n",
    b"INFO tar2tf: a log line of tar2tf's\n",
]
CUINIT = b"E0000 00:00:1796204883.185141 13393 cuda_platform.cc:52] failed call to cuInit: x\n"


@pytest.mark.parametrize("line", NOISE)
def test_start_up_log_is_dropped(line):
    assert startup_noise(line, no_driver=False)


@pytest.mark.parametrize("line", KEPT)
def test_other_lines_are_kept(line):
    assert not startup_noise(line, no_driver=True)


def test_cuinit_line_only_without_a_driver():
    assert startup_noise(CUINIT, no_driver=True)
    assert not startup_noise(CUINIT, no_driver=False)  # with a driver it is a real error
