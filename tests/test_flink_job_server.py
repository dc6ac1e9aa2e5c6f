"""launch/flink_job_server.py: the manifest-only launcher jar that Java really follows, and
the choice of Beam versions to assemble a Flink job server from."""

import os
import shutil
import subprocess
import zipfile

import pytest

from launch import flink_job_server as fjs


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
        "</versions></versioning></metadata>")
    repo = tmp_path.as_uri()
    assert fjs.published_versions("1.19", repo) == ["2.62.0", "2.70.0"]
    assert fjs.published_versions("2.2", repo) == []  # no such runner: nothing to try, no error


def _read_manifest(jar):
    with zipfile.ZipFile(jar) as z:
        assert z.namelist() == ["META-INF/MANIFEST.MF"]
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
    names = [f"some-long-artifact-name-{i:03d}-with-a-version-1.2.3.jar" for i in range(40)] + ["a.jar"]
    for n in names:
        (lib / n).write_bytes(b"PK")
    (lib / "README.txt").write_text("not a jar")
    jar = tmp_path / "srv" / "launcher.jar"
    fjs.write_launcher(str(jar), str(lib))
    m = _read_manifest(jar)
    assert m["Main-Class"] == fjs.MAIN_CLASS
    assert m["Class-Path"].split(" ") == [f"lib/{n}" for n in sorted(names)]
    first = jar.read_bytes()
    fjs.write_launcher(str(jar), str(lib))  # deterministic
    assert jar.read_bytes() == first and not os.path.exists(str(jar) + ".tmp")
    with pytest.raises(ValueError, match="no jars"):
        fjs.write_launcher(str(tmp_path / "x.jar"), str(tmp_path))


@pytest.mark.skipif(not (shutil.which("javac") and shutil.which("jar") and shutil.which("java")),
                    reason="needs a JDK (javac, jar, java)")
def test_java_runs_the_main_class_through_the_wrapped_class_path(tmp_path):
    """`java -jar launcher.jar ARGS` (how Beam starts a job server) finds the main class in
    the last of many lib/ jars, so the wrapped Class-Path header is read as Java reads it."""
    src = tmp_path / "src" / "org" / "apache" / "beam" / "runners" / "flink"
    src.mkdir(parents=True)
    (src / "FlinkJobServerDriver.java").write_text(
        "package org.apache.beam.runners.flink;\n"
        "public class FlinkJobServerDriver { public static void main(String[] a) {"
        " System.out.println(\"driver:\" + String.join(\",\", a)); } }\n")
    classes = tmp_path / "classes"
    subprocess.run(["javac", "-d", str(classes), str(src / "FlinkJobServerDriver.java")], check=True)
    lib = tmp_path / "server" / "lib"
    lib.mkdir(parents=True)
    for i in range(30):  # filler jars so that the header wraps many times
        subprocess.run(["jar", "--create", "--file", str(lib / f"filler-artifact-{i:02d}-0.0.1.jar"),
                        "-C", str(tmp_path / "src"), "."], check=True)
    subprocess.run(["jar", "--create", "--file", str(lib / "zz-runner-9.9.9.jar"), "-C", str(classes), "."],
                   check=True)
    jar = tmp_path / "server" / "job-server.jar"
    fjs.write_launcher(str(jar), str(lib))
    p = subprocess.run(["java", "-jar", str(jar), "--flink-master", "[local]"], capture_output=True, text=True,
                       cwd=str(tmp_path), timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "driver:--flink-master,[local]"
