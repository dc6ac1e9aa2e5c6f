"""Rules of the original Dataset/AisDataset API that need no job: where a source name
points (``location``), and where the ops run for each ``remote_exec`` and runner
(``pipelines.tfdata.runner_choice.use_beam``)."""

import pytest

from pipelines.tfdata.dataset import location


def test_location_rules(tmp_path, monkeypatch):
    monkeypatch.delenv("AIS_ENDPOINT", raising=False)
    assert location("imagenet", "http://proxy:8080") == "ais://imagenet"
    assert location("gs://bkt/", None) == "gs://bkt" and location("ais://b", None) == "ais://b"
    assert location(str(tmp_path), None) == str(tmp_path)
    with pytest.raises(ValueError, match="proxy_url"):
        location("no-such-bucket-or-dir", None)


@pytest.mark.parametrize(
    "mode, beam_args, in_memory, shuffle, beam",
    [
        (False, ["--runner=FlinkRunner"], True, False, False),  # False: always this process
        (True, [], True, False, True),  # True: Beam, on the local runner without --runner
        (True, [], False, False, True),
        (None, [], True, False, False),  # None, in memory: Beam only for a cluster runner
        (None, ["--runner=DirectRunner"], True, False, False),
        (None, ["--runner=FlinkRunner"], True, False, True),
        (None, [], False, False, False),  # None, written: Beam for any Beam option or shuffle
        (None, ["--direct_num_workers=2"], False, False, True),
        (None, [], False, True, True),
        (None, ["--runner=inprocess"], True, False, False),  # the in-process driver, by name
        (None, ["--runner=local"], True, False, False),  # and by its alias
        (None, ["--runner", "local"], False, False, False),
    ],
)
def test_where_the_ops_run_follows_the_remote_exec_table(mode, beam_args, in_memory, shuffle, beam):
    """The table of the module docstring of pipelines/tfdata/dataset.py, row by row."""
    from pipelines.tfdata.runner_choice import use_beam

    asked = []

    def why_not():
        asked.append(True)
        return None

    assert use_beam(mode, beam_args, why_not, in_memory=in_memory, shuffle=shuffle) is beam
    assert asked == ([True] if beam else [])  # the stages are pickled only to go to Beam


@pytest.mark.parametrize(
    "mode, beam_args, shuffle, says",
    [
        (None, ["--runner=inprocess", "--direct_num_workers=2"], False, "takes no Beam options"),
        (None, ["--runner=inprocess"], True, "cannot shuffle"),
        (True, ["--runner=inprocess"], False, "is not Beam"),
    ],
)
def test_the_in_process_driver_refuses_what_only_beam_does(mode, beam_args, shuffle, says):
    from pipelines.tfdata.runner_choice import use_beam

    with pytest.raises(
        ValueError, match=f"--runner=inprocess, the in-process driver, which {says}"
    ):
        use_beam(mode, beam_args, lambda: None, shuffle=shuffle)


def test_ops_that_cannot_be_pickled_stay_in_this_process_with_a_warning():
    from pipelines.tfdata.runner_choice import use_beam

    with pytest.warns(RuntimeWarning, match="not on Beam workers: Func cannot be pickled"):
        assert not use_beam(True, [], lambda: "Func cannot be pickled")
