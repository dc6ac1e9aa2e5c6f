"""The local runner's bundles sample state at a short period (pipelines/beam_sampler.py)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pipelines import beam_sampler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_shortens_the_default_only():
    class Sampler:  # a fresh class: the patch changes its __init__'s defaults
        def __init__(self, prefix, counter_factory, sampling_period_ms=200):
            self.sampling_period_ms = sampling_period_ms
    assert beam_sampler.shorten(Sampler, 10)
    assert Sampler("x", None).sampling_period_ms == 10
    assert Sampler("x", None, 500).sampling_period_ms == 500  # an explicit period is the caller's
    assert beam_sampler.shorten(Sampler, 50)  # a shorter default is kept
    assert Sampler("x", None).sampling_period_ms == 10


def test_leaves_an_unexpected_signature_alone():
    class Other:
        def __init__(self, prefix, period=200):
            self.period = period
    assert not beam_sampler.shorten(Other, 10)
    assert Other("x").period == 200


def test_beams_own_class_has_the_expected_shape():
    # the patch depends on Beam keeping the period as the last default argument
    import inspect
    from apache_beam.runners.worker.statesampler import StateSampler
    last = list(inspect.signature(StateSampler.__init__).parameters.values())[-1]
    assert last.name == "sampling_period_ms" and isinstance(last.default, int)


_JOB = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    import shardgen
    from apache_beam.runners.worker import statesampler
    periods = []
    start = statesampler.StateSampler.start
    def spy(self):  # every sampler a bundle starts
        periods.append(self.sampling_period_ms)
        start(self)
    statesampler.StateSampler.start = spy
    before = statesampler.StateSampler.__init__.__defaults__[-1]
    shardgen.make_shards({d!r}, 2, 4)
    if {kind!r} == "pcr":
        from pipelines.beam.pcr import PcrConfig, convert_pcr
        res = convert_pcr(PcrConfig(sources={d!r} + "/train-{{0000..0001}}.tar", output={o!r}, progress=False))
        written = res.totals["records_written"]
    else:
        from pipelines.beam.convert import ConvertConfig, convert
        res = convert(ConvertConfig(sources={d!r} + "/train-{{0000..0001}}.tar", output={o!r} + "/train-{{}}.record"))
        written = res.totals["records_written"]
    print("RESULT " + json.dumps({{"before": before, "periods": periods, "written": written}}))
""")


@pytest.mark.parametrize("kind", ["tfrecord", "pcr"])
def test_a_local_job_samples_at_the_short_period(tmp_path, kind):
    d, o = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(d)
    code = _JOB.format(root=ROOT, tests=os.path.join(ROOT, "tests"), d=d, o=o, kind=kind)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][0][7:])
    assert res["written"] == 8
    assert res["before"] == 200  # Beam's own default, before the job
    assert res["periods"] and all(x == beam_sampler.PERIOD_MS for x in res["periods"])
