"""launch/setup.d/flink_job_server.py: the manifest-only launcher jar that Java really follows, the
choice of Beam versions to assemble a Flink job server from, and its SLF4J binding (the
server on this machine, if assembled, really logs)."""

import io
import os
import shutil
import socket
import subprocess
import zipfile

import flink_job_server as fjs  # set-up code: launch/setup.d, outside the installed package
import pytest

_CACHE = os.environ.get("TAR2TF_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tar2tf")


def test_candidates_newest_first_not_above_the_sdk():
    listed = ["2.47.0", "2.62.0", "2.70.0", "2.78.0", "2.71.0-RC1", "2.9.0", "2.62.0"]
    assert fjs.candidates(listed, "2.77.0", 3) == ["2.70.0", "2.62.0", "2.47.0"]
    assert fjs.candidates(listed, "2.77.0", 1) == ["2.70.0"]
    assert fjs.candidates(listed, "2.62.0", 5) == ["2.62.0", "2.47.0", "2.9.0"]
    assert fjs.candidates([], "2.77.0", 3) == []


def test_published_versions_from_maven_metadata(tmp_path):
    d = tmp_path / "org" / "apache" / "beam" / "beam-runners-flink-1.19"
    d.mkdir(parents=True)
    (d / "maven-metadata.xml").write_text(
        "<metadata><versioning><versions>\n<version>2.62.0</version>\n <version> 2.70.0 </version>"
        "</versions></versioning></metadata>"
    )
    repo = tmp_path.as_uri()
    assert fjs.published_versions("1.19", repo) == ["2.62.0", "2.70.0"]
    assert fjs.published_versions("2.2", repo) == []  # no such runner: nothing to try, no error


def _read_manifest(jar):
    with zipfile.ZipFile(jar) as z:
        assert z.namelist() == ["META-INF/MANIFEST.MF", fjs.LOG_CONFIG]
        raw = z.read("META-INF/MANIFEST.MF")
    lines = raw.split(b"\r\n")
    assert all(len(line) <= 72 for line in lines)  # the JAR spec's limit
    headers, cur = {}, None
    for line in lines:
        if line.startswith(b" "):
            headers[cur] += line[1:]
        elif line:
            cur, _, v = line.partition(b": ")
            headers[cur] = v
    return {k.decode(): v.decode() for k, v in headers.items()}


def test_launcher_manifest_names_every_jar_relative_to_itself(tmp_path):
    lib = tmp_path / "srv" / "lib"
    lib.mkdir(parents=True)
    names = [f"some-long-artifact-name-{i:03d}-with-a-version-1.2.3.jar" for i in range(40)] + [
        "a.jar"
    ]
    for n in names:
        (lib / n).write_bytes(b"PK")
    (lib / "README.txt").write_text("not a jar")
    jar = tmp_path / "srv" / "launcher.jar"
    fjs.write_launcher(str(jar), str(lib))
    m = _read_manifest(jar)
    assert m["Main-Class"] == fjs.MAIN_CLASS
    with zipfile.ZipFile(jar) as z:  # slf4j-simple's configuration, read from the class path
        assert f"{fjs.LOG_LEVEL_PROPERTY}=warn" in z.read(fjs.LOG_CONFIG).decode().splitlines()
    assert m["Class-Path"].split(" ") == [f"lib/{n}" for n in sorted(names)]
    first = jar.read_bytes()
    fjs.write_launcher(str(jar), str(lib))  # deterministic
    assert jar.read_bytes() == first and not os.path.exists(str(jar) + ".tmp")
    with pytest.raises(ValueError, match="no jars"):
        fjs.write_launcher(str(tmp_path / "x.jar"), str(tmp_path))


@pytest.mark.skipif(
    not (shutil.which("javac") and shutil.which("jar") and shutil.which("java")),
    reason="needs a JDK (javac, jar, java)",
)
def test_java_runs_the_main_class_through_the_wrapped_class_path(tmp_path):
    """`java -jar launcher.jar ARGS` (how Beam starts a job server) finds the main class in
    the last of many lib/ jars, so the wrapped Class-Path header is read as Java reads it."""
    src = tmp_path / "src" / "org" / "apache" / "beam" / "runners" / "flink"
    src.mkdir(parents=True)
    (src / "FlinkJobServerDriver.java").write_text(
        "package org.apache.beam.runners.flink;\n"
        "public class FlinkJobServerDriver { public static void main(String[] a) {"
        ' System.out.println("driver:" + String.join(",", a)); } }\n'
    )
    classes = tmp_path / "classes"
    subprocess.run(
        ["javac", "-d", str(classes), str(src / "FlinkJobServerDriver.java")], check=True
    )
    lib = tmp_path / "server" / "lib"
    lib.mkdir(parents=True)
    for i in range(30):  # filler jars so that the header wraps many times
        subprocess.run(
            [
                "jar",
                "--create",
                "--file",
                str(lib / f"filler-artifact-{i:02d}-0.0.1.jar"),
                "-C",
                str(tmp_path / "src"),
                ".",
            ],
            check=True,
        )
    subprocess.run(
        ["jar", "--create", "--file", str(lib / "zz-runner-9.9.9.jar"), "-C", str(classes), "."],
        check=True,
    )
    jar = tmp_path / "server" / "job-server.jar"
    fjs.write_launcher(str(jar), str(lib))
    p = subprocess.run(
        ["java", "-jar", str(jar), "--flink-master", "[local]"],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "driver:--flink-master,[local]"


def _lib(path, names):
    path.mkdir(parents=True)
    for n in names:
        (path / n).write_bytes(b"PK")
    return str(path)


def test_the_binding_follows_the_slf4j_api_and_an_existing_binding_is_kept(tmp_path):
    runner = ["beam-runners-flink-1.19-2.62.0.jar", "flink-core-1.19.2.jar"]
    cases = [
        (["slf4j-api-1.7.30.jar"], "1.7.30"),
        (["slf4j-api-2.0.16.jar"], "2.0.16"),
        (["slf4j-api-1.7.30.jar", "slf4j-simple-1.7.30.jar"], None),
        (["slf4j-api-2.0.16.jar", "logback-classic-1.5.6.jar"], None),
        ([], None),  # nothing logs through SLF4J
        (["slf4j-api-1.7.36.jar", "log4j-api-2.17.1.jar"], "1.7.36"),  # log4j's API is no binding
        (["slf4j-api-1.7.36.jar", "log4j-slf4j-impl-2.17.1.jar"], None),
    ]  # its SLF4J binding is
    for i, (extra, want) in enumerate(cases):
        assert fjs.missing_binding(_lib(tmp_path / str(i), runner + extra)) == want, extra


def _old_launcher(jar, lib):
    """The launcher as the previous flink_job_server.py wrote it: a manifest, no log configuration."""
    data = fjs.launcher_bytes(str(jar), str(lib))
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(jar, "w") as z:
        z.writestr(src.getinfo("META-INF/MANIFEST.MF"), src.read("META-INF/MANIFEST.MF"))


def test_update_rewrites_an_old_launcher_only_once(tmp_path):
    lib = _lib(
        tmp_path / "srv" / "lib",
        ["flink-core-1.19.2.jar", "slf4j-api-1.7.30.jar", "slf4j-simple-1.7.30.jar"],
    )
    jar = tmp_path / "srv" / "beam-runners-flink-1.19-job-server-2.62.0-assembled.jar"
    _old_launcher(jar, lib)
    with zipfile.ZipFile(jar) as z:
        assert fjs.LOG_CONFIG not in z.namelist()
    with open(tmp_path / "log", "w") as log:
        assert fjs.update(str(jar), str(tmp_path / "m2"), log)  # the binding is there: no Maven
        _read_manifest(jar)
        first = os.stat(jar).st_mtime_ns, jar.read_bytes()
        assert fjs.update(str(jar), str(tmp_path / "m2"), log)
    assert (os.stat(jar).st_mtime_ns, jar.read_bytes()) == first  # current: not written again
    assert (tmp_path / "log").read_text() == "" and not (tmp_path / "m2").exists()
    assert fjs.main(["--cache", str(tmp_path), "--update", str(jar)]) == 0
    assert (
        fjs.main(["--cache", str(tmp_path), "--update", str(tmp_path / "log")]) == 1
    )  # no lib/ beside it
    with pytest.raises(SystemExit):  # assemble or update, not both
        fjs.main(
            ["--cache", str(tmp_path), "--update", str(jar), "--beam", "2.77.0", "--flink", "1.19"]
        )


def test_setup_step_updates_an_assembled_server_in_place(tmp_path):
    """An assembled server from before the log configuration: the setup step's rerun for
    the same Beam (its early exit) brings the launcher up to date and keeps flink.env."""
    from importlib.metadata import version

    cache = tmp_path / "cache"
    cache.mkdir()
    py = open(os.path.join(_CACHE, "venv-current")).read().strip()
    (cache / "venv-current").write_text(py + "\n")
    home = cache / "flink-job-server" / "1.19-2.62.0"
    lib = _lib(
        home / "lib", ["flink-core-1.19.2.jar", "slf4j-api-1.7.30.jar", "slf4j-simple-1.7.30.jar"]
    )
    jar = home / "beam-runners-flink-1.19-job-server-2.62.0-assembled.jar"
    _old_launcher(jar, lib)
    env = f"FLINK_VERSION=1.19\nFLINK_JOB_SERVER_JAR={jar}\nBEAM_VERSION={version('apache-beam')}\n"
    (cache / "flink.env").write_text(env)
    step = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        "launch",
        "setup.d",
        "50-flink.sh",
    )
    p = subprocess.run(
        ["bash", step],
        env=dict(os.environ, TAR2TF_CACHE=str(cache)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert jar.read_bytes() == fjs.launcher_bytes(str(jar), lib)
    assert (cache / "flink.env").read_text() == env


def _cached_assembled_jar():
    """The assembled job server launch/setup.d/50-flink.sh set up on this machine, if any."""
    try:
        env = dict(
            line.strip().split("=", 1)
            for line in open(os.path.join(_CACHE, "flink.env"))
            if "=" in line
        )
    except OSError:
        return None
    jar = env.get("FLINK_JOB_SERVER_JAR", "")
    return jar if jar.endswith("-assembled.jar") and os.path.isfile(jar) else None


_needs_server = pytest.mark.skipif(
    not (_cached_assembled_jar() and shutil.which("java")),
    reason="no assembled Flink job server (launch/setup.d/50-flink.sh) or no java",
)


@_needs_server
def test_the_assembled_server_has_the_binding_of_its_slf4j_api():
    jar = _cached_assembled_jar()
    lib = os.path.join(os.path.dirname(jar), "lib")
    api = fjs.jar_version(lib, "slf4j-api")
    assert api, "no slf4j-api in " + lib
    assert fjs.jar_version(lib, fjs.BINDING) == api
    assert f"lib/{fjs.BINDING}-{api}.jar" in _read_manifest(jar)["Class-Path"].split(" ")


@_needs_server
def test_the_assembled_server_logs_a_failed_start(tmp_path):
    """The job port is taken: the driver gives up and exits. Without an SLF4J binding it
    said nothing at all (SLF4J's no-op logger); now its WARN reaches stderr, at the
    launcher's default level."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        s.listen()
        port = s.getsockname()[1]
        p = subprocess.run(
            [
                "java",
                "-jar",
                _cached_assembled_jar(),
                "--job-port",
                str(port),
                "--artifact-port",
                "0",
                "--expansion-port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(tmp_path),
        )
    out = p.stdout + p.stderr
    driver = "WARN org.apache.beam.runners.jobsubmission.JobServerDriver"
    assert f"{driver} - Exception during job server creation" in out, out
    assert "Address already in use" in out
    assert "SLF4J" not in out  # no "no binding" or "multiple bindings" complaint
