"""pipelines.beam.distribute: gather collects everything once; spread loses and adds nothing
and lets the next step run on several workers."""

import json
import threading
from operator import itemgetter

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.beam.distribute import gather, spread
from pipelines.beam.options import effective_args


def _save(x, path):
    with open(path, "a") as f:
        f.write(json.dumps(x) + "\n")


def _run(build, tmp_path, workers=2):
    """The pipeline's output elements (each JSON-able), collected through a file: DoFns are
    pickled, so they cannot append to a list of the test's."""
    opts = PipelineOptions(
        effective_args(
            [
                "--runner=FnApiRunner",
                "--direct_running_mode=multi_threading",
                f"--direct_num_workers={workers}",
            ]
        )
    )
    path = str(tmp_path / "out.jsonl")
    open(path, "w").close()
    with beam.Pipeline(options=opts) as p:
        build(p) | beam.Map(_save, path)
    return [json.loads(line) for line in open(path)]


def _slow_thread_name(task):
    import time

    time.sleep(0.05)
    return task[0], threading.current_thread().name


def test_spread_then_gather_keeps_every_element_once(tmp_path):
    tasks = [(i, f"shard-{i}") for i in range(40)]
    got = _run(
        lambda p: gather(
            spread(p | beam.Create(tasks, reshuffle=False), "Spread", itemgetter(0))
            | beam.Map(_slow_thread_name),
            "Gather",
        ),
        tmp_path,
    )
    assert len(got) == 1
    assert sorted(i for i, _ in got[0]) == list(range(40))
    assert len({name for _, name in got[0]}) >= 2  # the spread elements ran on two workers


def test_gather_of_nothing_is_one_empty_list(tmp_path):
    got = _run(
        lambda p: gather(p | beam.Create([], reshuffle=False), "Gather"), tmp_path, workers=1
    )
    assert got == [[]]


def test_spread_by_dict_index(tmp_path):
    plan = [{"index": i, "path": f"out-{i}"} for i in range(5)]
    got = _run(
        lambda p: gather(
            spread(p | beam.Create(plan, reshuffle=False), "Spread", itemgetter("index")), "Gather"
        ),
        tmp_path,
    )
    assert sorted(got[0], key=itemgetter("index")) == plan
