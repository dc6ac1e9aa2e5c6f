"""The embedded Flink the set-up prepares (launch/setup.d/50-flink.sh): its job server jar
and Flink version, and ``launch/flink.sh`` run against them."""

from __future__ import annotations

import os
import shutil

import pytest

from support.scripts import launch_script

CACHE = os.environ.get("TAR2TF_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tar2tf")


def _flink_env():
    env = {}
    path = os.path.join(CACHE, "flink.env")
    if os.path.exists(path):
        for line in open(path):
            k, _, v = line.strip().partition("=")
            env[k] = v
    env["FLINK_JOB_SERVER_JAR"] = os.environ.get(
        "FLINK_JOB_SERVER_JAR", env.get("FLINK_JOB_SERVER_JAR", "")
    )
    env["FLINK_VERSION"] = os.environ.get("FLINK_VERSION", env.get("FLINK_VERSION", ""))
    return env


def flink_sh(*args, **env):
    """``bash launch/flink.sh *args`` with the set-up's cache and ``env``."""
    return launch_script("flink.sh", *args, env={"TAR2TF_CACHE": CACHE, **env})


@pytest.fixture(scope="module")
def flink():
    """The job server jar and Flink version (launch/setup.d/50-flink.sh), or a loud skip."""
    env = _flink_env()
    if not shutil.which("java"):
        pytest.skip(
            "FLINK TEST SKIPPED: java is not on PATH (apt-get install openjdk-17-jre-headless)"
        )
    if not env["FLINK_JOB_SERVER_JAR"] or not os.path.isfile(env["FLINK_JOB_SERVER_JAR"]):
        why = ""
        marker = os.path.join(CACHE, "flink.unavailable")
        if os.path.exists(marker):
            why = ": " + open(marker).readline().strip()
        pytest.skip(
            "FLINK TEST SKIPPED: no Beam Flink job server jar (launch/setup.d/50-flink.sh; "
            f"or set FLINK_JOB_SERVER_JAR and FLINK_VERSION){why}"
        )
    return {
        "FLINK_JOB_SERVER_JAR": env["FLINK_JOB_SERVER_JAR"],
        "FLINK_VERSION": env["FLINK_VERSION"],
    }
