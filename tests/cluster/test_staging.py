"""Dataflow staging, proven locally: the launch script's options parse as Beam options;
Beam's own stager builds the package from setup.py (what Dataflow uploads); installed
into a fresh virtualenv that sees the third-party dependencies but not this source tree,
it converts the demo shards from another directory to the same bytes as the in-tree run."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
from support.cli_fixtures import DEMO_ARGS, DEMO_SOURCES, ROOT, output_digest
from support.scripts import launch_script

DATAFLOW_ENV = {
    "PROJECT": "my-project",
    "REGION": "europe-west4",
    "TEMP_LOCATION": "gs://my-bucket/tmp",
}
OURS = ("tar2tf", "__editable__", "__editable___tar2tf", "transforms", "pipelines", "launch")


def _dry_run(*args, **env):
    return launch_script("dataflow.sh", "--dry-run", *args, env=env, drop=DATAFLOW_ENV)


def test_dataflow_script_options_parse():
    from apache_beam.options.pipeline_options import (
        GoogleCloudOptions,
        PipelineOptions,
        SetupOptions,
        StandardOptions,
        WorkerOptions,
    )

    src, out = "gs://my-bucket/train-{0000..0147}.tar", "gs://my-bucket/tf/train-{}.record"
    p = _dry_run(
        src, "--output", out, "--max-shard-size", "100MB", "--max_num_workers=20", **DATAFLOW_ENV
    )
    assert p.returncode == 0, p.stdout + p.stderr
    d = json.loads(p.stdout)
    assert d["problems"] == [] and d["sources"] == [src] and d["output"] == out
    opts = PipelineOptions(d["beam_args"])  # what tar2tf convert hands to Beam
    assert opts.view_as(StandardOptions).runner == "DataflowRunner"
    g = opts.view_as(GoogleCloudOptions)
    assert (g.project, g.region, g.temp_location) == (
        "my-project",
        "europe-west4",
        "gs://my-bucket/tmp",
    )
    assert opts.view_as(SetupOptions).setup_file == os.path.join(ROOT, "setup.py")
    assert opts.view_as(WorkerOptions).max_num_workers == 20
    # the alternatives to setup.py
    p = _dry_run(
        src,
        "--output",
        out,
        DEPS="container",
        SDK_CONTAINER_IMAGE="eu.gcr.io/p/tar2tf:1",
        **DATAFLOW_ENV,
    )
    d = json.loads(p.stdout)
    assert p.returncode == 0 and d["worker"]["sdk_container_image"] == "eu.gcr.io/p/tar2tf:1"
    assert d["setup"]["setup_file"] is None
    req = os.path.join(ROOT, "pyproject.toml")  # any existing file stands in for requirements.txt
    pkg = os.path.join(ROOT, "setup.py")  # any existing file stands in for the built sdist
    p = _dry_run(
        src,
        "--output",
        out,
        DEPS="requirements",
        REQUIREMENTS_FILE=req,
        EXTRA_PACKAGE=pkg,
        **DATAFLOW_ENV,
    )
    d = json.loads(p.stdout)
    assert p.returncode == 0 and d["setup"]["requirements_file"] == req
    assert d["setup"]["extra_packages"] == [pkg]
    p = _dry_run(
        src,
        "--output",
        out,
        DEPS="requirements",
        REQUIREMENTS_FILE=req,
        EXTRA_PACKAGE="dist/t.tar.gz",
        **DATAFLOW_ENV,
    )
    assert p.returncode == 2 and "--extra_package 'dist/t.tar.gz' does not exist" in p.stderr
    # mistakes are caught before submitting
    p = _dry_run(src, "--output", out)
    assert p.returncode == 2 and "set PROJECT TEMP_LOCATION" in p.stderr
    p = _dry_run(
        src, "--output", "out/local-{}.record", **dict(DATAFLOW_ENV, TEMP_LOCATION="/tmp/x")
    )
    assert p.returncode == 2
    assert "--temp_location must be a gs:// path" in p.stderr and "is a local path" in p.stderr
    # a relative source under a remote --base is remote; a local --work-dir is not
    p = _dry_run("raw/train-{0000..0001}.tar", "--base", "gs://b", "--output", out, **DATAFLOW_ENV)
    assert p.returncode == 0, p.stderr
    p = _dry_run(src, "--output", out, "--work-dir", "/tmp/localwork", **DATAFLOW_ENV)
    assert p.returncode == 2 and "--work-dir '/tmp/localwork' is a local path" in p.stderr
    # a first argument `pcr` submits `tar2tf pcr` (its own checks: remote output here too)
    p = _dry_run(
        "pcr", src, "--output", "gs://my-bucket/pcr", "--images-per-record", "1024", **DATAFLOW_ENV
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["command"] == "pcr"
    p = _dry_run("pcr", src, "--output", "pcr-local", **DATAFLOW_ENV)
    assert p.returncode == 2 and "--output 'pcr-local' is a local path" in p.stderr
    # --dry-run is the script's flag wherever it stands (a misplaced one must not submit);
    # --help shows the script's usage
    e = dict(os.environ, TAR2TF_PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="3", **DATAFLOW_ENV)
    script = os.path.join(ROOT, "launch", "dataflow.sh")
    p = subprocess.run(
        ["bash", script, src, "--output", out, "--dry-run"],
        capture_output=True,
        text=True,
        env=e,
        cwd=ROOT,
    )
    assert p.returncode == 0 and json.loads(p.stdout)["output"] == out, p.stderr
    p = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, env=e, cwd=ROOT)
    assert p.returncode == 0 and "--dry-run" in p.stdout and "PROJECT=" in p.stdout


def _copy_tree(dst):
    ignore = shutil.ignore_patterns(
        ".git",
        "*.egg-info",
        "__pycache__",
        ".tar2tf-work",
        "demo-out",
        "build",
        "dist",
        "benchmarks",
        "tests",
        "docs",
        ".pytest_cache",
    )
    shutil.copytree(ROOT, dst, ignore=ignore)
    return dst


def _fresh_venv(path, tmp_path):
    """A venv whose own site-packages is empty, plus the main venv's third-party packages
    through a filtered view: every entry except tar2tf's own (its dist-info, its editable
    finder, anything named like its packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    main_site = sysconfig.get_paths()["purelib"]
    view = tmp_path / "deps-view"
    view.mkdir()
    for name in os.listdir(main_site):
        if not name.startswith(OURS):
            os.symlink(os.path.join(main_site, name), view / name)
    py = str(path / "bin" / "python")
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with open(os.path.join(site, "zz_main_deps.pth"), "w") as f:
        f.write(f"import site; site.addsitedir({str(view)!r})\n")
    return py, site


def test_staged_package_runs_from_a_clean_venv(demo_output, tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.stager import Stager

    src_copy = _copy_tree(str(tmp_path / "src"))
    p = _dry_run(DEMO_SOURCES, "--output", "gs://b/o/demo-{}.record", **DATAFLOW_ENV)
    beam_args = [
        a if not a.startswith("--setup_file=") else f"--setup_file={src_copy}/setup.py"
        for a in json.loads(p.stdout)["beam_args"]
    ]
    staging = tmp_path / "staging"
    staging.mkdir()
    # exactly what the Dataflow runner does at submission: build the workflow tarball
    resources = Stager.create_job_resources(
        PipelineOptions(beam_args), str(staging), log_submission_env_dependencies=False
    )
    assert any(r.role_payload for r in resources)
    sdists = [f for f in os.listdir(staging) if f.endswith(".tar.gz")]
    assert len(sdists) == 1 and sdists[0].startswith("tar2tf-")

    py, site = _fresh_venv(tmp_path / "venv", tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", PIP_DISABLE_PIP_VERSION_CHECK="1")
    inst = subprocess.run(
        [
            py,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(staging / sdists[0]),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
    )
    assert inst.returncode == 0, inst.stdout + inst.stderr

    work = tmp_path / "elsewhere"
    work.mkdir()
    # nothing is imported from the source tree: every tar2tf module comes from the venv
    probe = subprocess.run(
        [
            py,
            "-c",
            "import sys, launch.cli, launch.cmd_convert, launch.cmd_verify, "
            "pipelines.beam.convert, pipelines.verify, pipelines.beam.shuffle, transforms.tfrecord.example; "
            "print('\\n'.join(m.__file__ for n, m in sorted(sys.modules.items()) "
            "if n.split('.')[0] in ('launch', 'pipelines', 'transforms') and getattr(m, '__file__', None)))",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(work),
    )
    assert probe.returncode == 0, probe.stderr
    files = probe.stdout.split()
    assert files and all(f.startswith(site) for f in files), [
        f for f in files if not f.startswith(site)
    ]

    tar2tf = os.path.join(os.path.dirname(py), "tar2tf")
    run = subprocess.run(
        [
            tar2tf,
            "convert",
            DEMO_SOURCES,
            "--output",
            str(work / "out" / "demo-{}.record"),
            *DEMO_ARGS,
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(work),
    )
    assert run.returncode == 0, run.stderr
    assert output_digest(str(work / "out")) == output_digest(demo_output[0])
    ver = subprocess.run(
        [tar2tf, "verify", "out/demo.record.manifest.json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(work),
    )
    assert ver.returncode == 0, ver.stdout + ver.stderr


@pytest.mark.parametrize("missing", ["transforms/tfrecord/framing.py"])
def test_clean_venv_check_can_fail(tmp_path, missing):
    """Control: the same venv setup without a module of ours really fails to import it
    (so the test above cannot pass by reaching the source tree)."""
    py, _ = _fresh_venv(tmp_path / "venv", tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    mod = missing[:-3].replace("/", ".")
    p = subprocess.run(
        [py, "-c", f"import {mod}"], capture_output=True, text=True, env=env, cwd=str(tmp_path)
    )
    assert p.returncode != 0 and "No module named" in p.stderr
