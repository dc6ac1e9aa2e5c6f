"""How many worker processes the in-process driver gives a job by default
(``auto_processes``), and which ops make a job heavy enough to need them
(``ConvertConfig.has_heavy_ops``)."""

from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.ops import Func, Resize


def test_in_process_only_jobs_with_heavy_ops_get_worker_processes_by_default():
    from pipelines.inprocess.driver import auto_processes

    assert auto_processes(2, 8, ops=True) == 2 and auto_processes(2, 8, ops=False) == 0
    assert auto_processes(4, 3) == 3 and auto_processes(1, 8) == 0 and auto_processes(2, 1) == 0


def test_heavy_ops_are_told_from_light_ones():
    from transforms.ops import Decode
    from transforms.ops.gostages import ByKey, BySampleF, Rename
    from transforms.ops.leaves import selection_stage
    from transforms.ops.selections import SelectDict, SelectJSON

    def heavy(*stages, **kw):
        return ConvertConfig(sources="x", output="o", sample_stages=stages, **kw).has_heavy_ops()

    assert not heavy()  # passthrough
    assert not heavy(selection_stage(["jpg", "cls"]), Rename("img", "jpg"), ByKey("img"))
    assert not heavy(selection_stage([SelectDict({"a": "jpg"}), SelectJSON("json", "label")]))
    assert heavy(selection_stage([Decode("jpg"), "cls"]))  # a decode inside a selection
    assert heavy(selection_stage([SelectDict({"a": Decode("jpg")})]))
    assert (
        heavy(Resize("jpg", (8, 8)))
        and heavy(Func(lambda r: r))
        and heavy(BySampleF(lambda x: ["jpg"]))
    )
    assert heavy(record_to_example=lambda r: r)
