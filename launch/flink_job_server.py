"""A Beam Flink job server put together from its Maven Central parts.

Beam publishes the Flink job server as one shaded jar,
``org.apache.beam:beam-runners-flink-<flink>-job-server:<beam>``.  Where a Maven repository
serves the runner (``beam-runners-flink-<flink>``) but not that jar, the same server can be
run from the runner and its dependencies: Maven resolves them into a ``lib/`` directory,
and a small jar holding only a manifest (``Main-Class`` = the job server driver,
``Class-Path`` = the ``lib/`` jars) lets Beam's Python FlinkRunner start it exactly as it
starts the shaded jar (``java -jar <jar> --flink-master ... --job-port ...``).

Used by launch/setup.d/50-flink.sh when ``mvn dependency:get`` finds no job server jar:

    python launch/flink_job_server.py --cache DIR --beam 2.77.0 --flink 2.2 2.1 1.19

prints ``<flink version> <jar>`` of the first runner version that resolves (Beam versions
from the newest not above --beam down, at most --tries per Flink version) and exits 0, or
explains on stderr and exits 1.  Stdlib only: it runs before anything else is known to work.
"""

import argparse
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
      <groupId>org.apache.beam</groupId>
      <artifactId>beam-runners-flink-{flink}</artifactId>
      <version>{beam}</version>
    </dependency>
  </dependencies>
</project>
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


def write_launcher(jar: str, lib_dir: str) -> None:
    """A manifest-only jar whose Class-Path names every jar in lib_dir, relative to the jar.
    Written under a temporary name and renamed, so a half-written jar is never used."""
    rel = os.path.relpath(lib_dir, os.path.dirname(os.path.abspath(jar)))
    libs = sorted(f for f in os.listdir(lib_dir) if f.endswith(".jar"))
    if not libs:
        raise ValueError(f"no jars in {lib_dir}")
    class_path = " ".join(f"{rel}/{f}".replace(os.sep, "/") for f in libs)
    manifest = (_manifest_line("Manifest-Version: 1.0") + _manifest_line(f"Main-Class: {MAIN_CLASS}")
                + _manifest_line("Created-By: tar2tf launch/flink_job_server.py")
                + _manifest_line(f"Class-Path: {class_path}") + b"\r\n")
    tmp = jar + ".tmp"
    with zipfile.ZipFile(tmp, "w") as z:
        # a fixed timestamp: the same lib/ gives the same bytes
        z.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", date_time=(1980, 1, 1, 0, 0, 0)), manifest)
    os.replace(tmp, jar)


def resolve(flink: str, beam: str, home: str, m2: str, log) -> Optional[str]:
    """mvn copy-dependencies of beam-runners-flink-<flink>:<beam> into home/lib and the
    launcher jar beside it; returns the jar, or None when Maven cannot resolve everything."""
    work = home + ".partial"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(os.path.join(work, "pom.xml"), "w") as f:
        f.write(POM.format(flink=flink, beam=beam))
    cmd = ["mvn", "-q", "-B", f"-Dmaven.repo.local={m2}", "-f", os.path.join(work, "pom.xml"),
           "dependency:copy-dependencies", "-DincludeScope=runtime",
           f"-DoutputDirectory={os.path.join(work, 'lib')}"]
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    if p.returncode != 0 or not os.path.isdir(os.path.join(work, "lib")):
        shutil.rmtree(work, ignore_errors=True)
        return None
    name = f"beam-runners-flink-{flink}-job-server-{beam}-assembled.jar"
    write_launcher(os.path.join(work, name), os.path.join(work, "lib"))
    shutil.rmtree(home, ignore_errors=True)
    os.replace(work, home)  # lib/ and the jar appear together, under their final names
    return os.path.join(home, name)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True, help="where the server goes (flink-job-server/<flink>-<beam>/)")
    ap.add_argument("--beam", required=True, help="the installed apache-beam version (the newest to try)")
    ap.add_argument("--flink", nargs="+", required=True, help="Flink versions, in the order to try")
    ap.add_argument("--repo", default=os.environ.get("TAR2TF_MAVEN_REPO", DEFAULT_REPO),
                    help="where to read the version lists (mvn itself follows ~/.m2/settings.xml)")
    ap.add_argument("--tries", type=int, default=3, help="Beam versions tried per Flink version")
    a = ap.parse_args(argv)
    m2 = os.path.join(a.cache, "m2")
    tried: List[str] = []
    with open(os.path.join(a.cache, "mvn-flink-assemble.log"), "a") as log:
        for flink in a.flink:
            for beam in candidates(published_versions(flink, a.repo), a.beam, a.tries):
                tried.append(f"{flink}:{beam}")
                print(f"assembling the Flink {flink} job server from beam-runners-flink-{flink}:{beam} "
                      "and its dependencies (Maven)", file=sys.stderr)
                home = os.path.join(a.cache, "flink-job-server", f"{flink}-{beam}")
                jar = resolve(flink, beam, home, m2, log)
                if jar:
                    shutil.rmtree(m2, ignore_errors=True)  # lib/ holds copies; the local repo is not needed
                    print(flink, jar)
                    return 0
    why = ("no version resolved completely: " + ", ".join(tried)) if tried else \
        f"{a.repo} lists no beam-runners-flink-{{{','.join(a.flink)}}} release at or below Beam {a.beam}"
    print(f"cannot assemble a Flink job server: {why}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
