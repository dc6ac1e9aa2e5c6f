"""A Beam Flink job server put together from its Maven Central parts.

Beam publishes the Flink job server as one shaded jar,
``org.apache.beam:beam-runners-flink-<flink>-job-server:<beam>``.  Where a Maven repository
serves the runner (``beam-runners-flink-<flink>``) but not that jar, the same server can be
run from the runner and its dependencies: Maven resolves them into a ``lib/`` directory,
and a small jar holding only a manifest (``Main-Class`` = the job server driver,
``Class-Path`` = the ``lib/`` jars) lets Beam's Python FlinkRunner start it exactly as it
starts the shaded jar (``java -jar <jar> --flink-master ... --job-port ...``).

The runner's dependencies include the SLF4J API but no binding, without which SLF4J
drops every log line (Flink's, Beam's).  Like the published jar, the assembled server
gets ``org.slf4j:slf4j-simple`` of the same version as its ``slf4j-api``, configured by a
``simplelogger.properties`` in the launcher jar: WARN and above, on stderr (which Beam's
Python runner reads); ``-Dorg.slf4j.simpleLogger.defaultLogLevel=info`` overrides it.

Used by launch/setup.d/50-flink.sh when ``mvn dependency:get`` finds no job server jar:

    python launch/setup.d/flink_job_server.py --cache DIR --beam 2.77.0 --flink 2.2 2.1 1.19

prints ``<flink version> <jar>`` of the first runner version that resolves (Beam versions
from the newest not above --beam down, at most --tries per Flink version) and exits 0, or
explains on stderr and exits 1.

    python launch/setup.d/flink_job_server.py --cache DIR --update JAR

brings a server assembled by an older version of this file up to date in place (today:
the logging binding, one small download; nothing else is resolved again); exit 1 when
that fails (the server still runs, without logs).  Stdlib only: it runs before anything
else is known to work.
"""

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from typing import List, Optional, Sequence, Tuple

MAIN_CLASS = "org.apache.beam.runners.flink.FlinkJobServerDriver"
DEFAULT_REPO = "https://repo.maven.apache.org/maven2"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.tar2tf</groupId>
  <artifactId>flink-job-server-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""

# SLF4J bindings (1.x) and providers (2.x): with none on the class path SLF4J logs nothing.
# One already there is kept; else BINDING, the one Beam's published job server jar has.
SLF4J_BINDINGS = (
    "slf4j-simple",
    "slf4j-jdk14",
    "slf4j-log4j12",
    "slf4j-reload4j",
    "slf4j-nop",
    "log4j-slf4j-impl",
    "log4j-slf4j2-impl",
    "logback-classic",
)
BINDING = "slf4j-simple"
LOG_LEVEL_PROPERTY = "org.slf4j.simpleLogger.defaultLogLevel"
DEFAULT_LOG_LEVEL = "warn"
LOG_CONFIG = "simplelogger.properties"  # slf4j-simple reads it from the class path (the launcher)
LOG_CONFIG_TEXT = f"""# tar2tf: the assembled Flink job server's log (slf4j-simple), on stderr.
# A JVM system property overrides it: -D{LOG_LEVEL_PROPERTY}=info
{LOG_LEVEL_PROPERTY}={DEFAULT_LOG_LEVEL}
"""


def version_key(v: str) -> Tuple[int, ...]:
    """'2.62.0' -> (2, 62, 0); a pre-release or odd tail sorts by its leading numbers."""
    return tuple(int(p) for p in re.findall(r"\d+", v.split("-")[0]))


def published_versions(flink: str, repo: str = DEFAULT_REPO, timeout: float = 15) -> List[str]:
    """Beam versions of beam-runners-flink-<flink> that the repository lists (maven-metadata.xml)."""
    url = f"{repo.rstrip('/')}/org/apache/beam/beam-runners-flink-{flink}/maven-metadata.xml"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            text = r.read().decode("utf-8", "replace")
    except OSError:  # 404 (no such runner), no network: nothing to try
        return []
    return re.findall(r"<version>\s*([^<\s]+)\s*</version>", text)


def candidates(versions: Sequence[str], beam: str, tries: int) -> List[str]:
    """Release versions not newer than the SDK's, newest first, at most `tries`."""
    top = version_key(beam)
    rel = [v for v in versions if re.fullmatch(r"\d+\.\d+\.\d+", v) and version_key(v) <= top]
    return sorted(set(rel), key=version_key, reverse=True)[:tries]


def _manifest_line(text: str) -> bytes:
    """A manifest header wrapped at 72 bytes, continuation lines starting with a space (JAR spec)."""
    b = text.encode("utf-8")
    parts = [b[:72]]
    b = b[72:]
    while b:
        parts.append(b" " + b[:71])
        b = b[71:]
    return b"\r\n".join(parts) + b"\r\n"


def launcher_bytes(jar: str, lib_dir: str) -> bytes:
    """The launcher jar at path `jar`: a manifest whose Class-Path names every jar in
    lib_dir, relative to the jar, and the log configuration (LOG_CONFIG)."""
    rel = os.path.relpath(lib_dir, os.path.dirname(os.path.abspath(jar)))
    libs = sorted(f for f in os.listdir(lib_dir) if f.endswith(".jar"))
    if not libs:
        raise ValueError(f"no jars in {lib_dir}")
    class_path = " ".join(f"{rel}/{f}".replace(os.sep, "/") for f in libs)
    manifest = (
        _manifest_line("Manifest-Version: 1.0")
        + _manifest_line(f"Main-Class: {MAIN_CLASS}")
        + _manifest_line("Created-By: tar2tf launch/setup.d/flink_job_server.py")
        + _manifest_line(f"Class-Path: {class_path}")
        + b"\r\n"
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        # a fixed timestamp: the same lib/ gives the same bytes
        for name, data in (
            ("META-INF/MANIFEST.MF", manifest),
            (LOG_CONFIG, LOG_CONFIG_TEXT.encode()),
        ):
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def write_launcher(jar: str, lib_dir: str) -> None:
    """The launcher jar (launcher_bytes), written under a temporary name and renamed, so
    that a half-written jar is never used."""
    data = launcher_bytes(jar, lib_dir)
    tmp = jar + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, jar)


def jar_version(lib_dir: str, artifact: str) -> Optional[str]:
    """The version of `artifact` in lib_dir (copy-dependencies names jars <artifact>-<version>.jar)."""
    for f in sorted(os.listdir(lib_dir)):
        m = re.fullmatch(re.escape(artifact) + r"-(\d[^/]*)\.jar", f)
        if m:
            return m.group(1)
    return None


def missing_binding(lib_dir: str) -> Optional[str]:
    """The version of BINDING that lib_dir needs: its slf4j-api's, when it holds no SLF4J
    binding; None when it has one, or no slf4j-api (nothing logs through SLF4J)."""
    api = jar_version(lib_dir, "slf4j-api")
    if api is None or any(jar_version(lib_dir, b) for b in SLF4J_BINDINGS):
        return None
    return api


def _mvn_copy(
    work: str, group: str, artifact: str, version: str, m2: str, log, transitive: bool = True
) -> bool:
    """mvn dependency:copy-dependencies of group:artifact:version into work/lib (runtime scope)."""
    with open(os.path.join(work, "pom.xml"), "w") as f:
        f.write(POM.format(group=group, artifact=artifact, version=version))
    cmd = [
        "mvn",
        "-q",
        "-B",
        f"-Dmaven.repo.local={m2}",
        "-f",
        os.path.join(work, "pom.xml"),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={os.path.join(work, 'lib')}",
    ] + ([] if transitive else ["-DexcludeTransitive=true"])
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    return p.returncode == 0 and os.path.isdir(os.path.join(work, "lib"))


def add_binding(lib_dir: str, m2: str, log) -> bool:
    """Puts BINDING (the version of lib_dir's slf4j-api) into lib_dir, unless it has a
    binding already; False when Maven cannot get it."""
    version = missing_binding(lib_dir)
    if version is None:
        return True
    work = lib_dir.rstrip(os.sep) + ".binding"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        name = f"{BINDING}-{version}.jar"
        if not _mvn_copy(
            work, "org.slf4j", BINDING, version, m2, log, transitive=False
        ) or not os.path.isfile(os.path.join(work, "lib", name)):
            return False
        os.replace(os.path.join(work, "lib", name), os.path.join(lib_dir, name))
        return True
    finally:
        shutil.rmtree(work, ignore_errors=True)


def update(jar: str, m2: str, log) -> bool:
    """Brings an assembled server (jar + lib/ beside it) up to date in place: the logging
    binding, then the launcher (rewritten only if its bytes differ).  False when the
    binding cannot be had; the launcher is made current either way."""
    lib = os.path.join(os.path.dirname(os.path.abspath(jar)), "lib")
    ok = add_binding(lib, m2, log)
    want = launcher_bytes(jar, lib)
    with open(jar, "rb") as f:
        if f.read() != want:
            write_launcher(jar, lib)
    return ok


def resolve(flink: str, beam: str, home: str, m2: str, log) -> Optional[str]:
    """mvn copy-dependencies of beam-runners-flink-<flink>:<beam> into home/lib and the
    launcher jar beside it; returns the jar, or None when Maven cannot resolve everything."""
    work = home + ".partial"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    if not _mvn_copy(work, "org.apache.beam", f"beam-runners-flink-{flink}", beam, m2, log):
        shutil.rmtree(work, ignore_errors=True)
        return None
    if not add_binding(os.path.join(work, "lib"), m2, log):
        # the server runs without it, only silently; setup's next run retries (--update)
        print(
            f"WARNING: no org.slf4j:{BINDING} for the job server: it will log nothing",
            file=sys.stderr,
        )
    name = f"beam-runners-flink-{flink}-job-server-{beam}-assembled.jar"
    write_launcher(os.path.join(work, name), os.path.join(work, "lib"))
    shutil.rmtree(home, ignore_errors=True)
    os.replace(work, home)  # lib/ and the jar appear together, under their final names
    return os.path.join(home, name)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--cache", required=True, help="where the server goes (flink-job-server/<flink>-<beam>/)"
    )
    ap.add_argument("--beam", help="the installed apache-beam version (the newest to try)")
    ap.add_argument("--flink", nargs="+", help="Flink versions, in the order to try")
    ap.add_argument(
        "--update", metavar="JAR", help="bring this assembled server up to date instead"
    )
    ap.add_argument(
        "--repo",
        default=os.environ.get("TAR2TF_MAVEN_REPO", DEFAULT_REPO),
        help="where to read the version lists (mvn itself follows ~/.m2/settings.xml)",
    )
    ap.add_argument("--tries", type=int, default=3, help="Beam versions tried per Flink version")
    a = ap.parse_args(argv)
    if (a.update is None) == (a.beam is None or a.flink is None) or (
        a.update and (a.beam or a.flink)
    ):
        ap.error("give --beam and --flink (assemble), or --update JAR")
    m2 = os.path.join(a.cache, "m2")
    with open(os.path.join(a.cache, "mvn-flink-assemble.log"), "a") as log:
        if a.update:
            if not os.path.isfile(a.update) or not os.path.isdir(
                os.path.join(os.path.dirname(a.update), "lib")
            ):
                print(
                    f"{a.update} is not an assembled job server (no lib/ beside it)",
                    file=sys.stderr,
                )
                return 1
            ok = update(a.update, m2, log)
            shutil.rmtree(m2, ignore_errors=True)
            if not ok:
                print(
                    f"cannot get org.slf4j:{BINDING} for {a.update}: the job server will log nothing "
                    f"(log: {log.name})",
                    file=sys.stderr,
                )
            return 0 if ok else 1
        tried: List[str] = []
        for flink in a.flink:
            for beam in candidates(published_versions(flink, a.repo), a.beam, a.tries):
                tried.append(f"{flink}:{beam}")
                print(
                    f"assembling the Flink {flink} job server from beam-runners-flink-{flink}:{beam} "
                    "and its dependencies (Maven)",
                    file=sys.stderr,
                )
                home = os.path.join(a.cache, "flink-job-server", f"{flink}-{beam}")
                jar = resolve(flink, beam, home, m2, log)
                if jar:
                    shutil.rmtree(
                        m2, ignore_errors=True
                    )  # lib/ holds copies; the local repo is not needed
                    print(flink, jar)
                    return 0
    why = (
        ("no version resolved completely: " + ", ".join(tried))
        if tried
        else f"{a.repo} lists no beam-runners-flink-{{{','.join(a.flink)}}} release at or below Beam {a.beam}"
    )
    print(f"cannot assemble a Flink job server: {why}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
