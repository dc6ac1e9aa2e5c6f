"""The Apache Flink distribution's jars, from PyPI, for a standalone session cluster
(``launch/flink/``).

Flink's binary distribution is not served by the package registries this project uses,
but PyFlink's ``apache-flink-libraries`` source distribution carries its jars:
``deps/lib/`` (``flink-dist-*.jar``, the table jars, log4j) and
``deps/bin/bash-java-utils.jar`` (which computes a TaskManager's memory and CPU options).
Its shell scripts are not there, so ``launch.flink.jvm`` starts the JVMs itself.

    python launch/setup.d/flink_dist.py --cache DIR --flink 1.19

prints the directory holding ``lib/`` and ``bin/bash-java-utils.jar`` for the newest
1.19.x on PyPI, fetching it once (``pip download --no-deps --no-binary :all:``, ~230 MB)
into ``DIR/flink-dist/<version>/``; a later run with any 1.19.x there prints it without
asking PyPI.  Exit 1 with the reason on stderr when it cannot.  Stdlib only (plus pip).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
from typing import Optional, Sequence, Tuple

PACKAGE = "apache-flink-libraries"
BASH_JAVA_UTILS = "bin/bash-java-utils.jar"


def _version_key(v: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", v))


def complete(home: str) -> bool:
    """A distribution directory with what a cluster needs (written by `fetch` only whole)."""
    lib = os.path.join(home, "lib")
    return (
        os.path.isfile(os.path.join(home, BASH_JAVA_UTILS))
        and os.path.isdir(lib)
        and any(f.startswith("flink-dist") and f.endswith(".jar") for f in os.listdir(lib))
    )


def cached(root: str, minor: str) -> Optional[str]:
    """The newest complete <minor>.x distribution under root, if any."""
    if not os.path.isdir(root):
        return None
    found = [
        d
        for d in os.listdir(root)
        if re.fullmatch(re.escape(minor) + r"\.\d+", d) and complete(os.path.join(root, d))
    ]
    return os.path.join(root, max(found, key=_version_key)) if found else None


def extract(sdist: str, home: str) -> None:
    """deps/lib/* and deps/bin/bash-java-utils.jar of the sdist into home (made whole under
    a temporary name, then renamed: a cut-off run leaves nothing that looks usable)."""
    work = home + ".partial"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "lib"))
    os.makedirs(os.path.join(work, "bin"))
    with tarfile.open(sdist) as tf:
        for m in tf:
            parts = m.name.split("/")
            # <package>-<version>/deps/lib/<jar> or .../deps/bin/bash-java-utils.jar
            if not m.isfile() or len(parts) != 4 or parts[1] != "deps":
                continue
            if (
                parts[2] == "lib"
                and parts[3].endswith(".jar")
                or "/".join(parts[2:]) == BASH_JAVA_UTILS
            ):
                src = tf.extractfile(m)
                with open(os.path.join(work, parts[2], parts[3]), "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
    if not complete(work):
        shutil.rmtree(work, ignore_errors=True)
        raise ValueError(f"{sdist} holds no deps/lib/flink-dist-*.jar and {BASH_JAVA_UTILS}")
    shutil.rmtree(home, ignore_errors=True)
    os.replace(work, home)


def fetch(cache: str, minor: str, log) -> str:
    """The <minor>.x distribution's directory, downloaded and extracted if not cached."""
    root = os.path.join(cache, "flink-dist")
    have = cached(root, minor)
    if have:
        return have
    download = os.path.join(root, "download")
    shutil.rmtree(download, ignore_errors=True)
    os.makedirs(download)
    nxt = ".".join(str(n) for n in _version_key(minor)[:1] + (_version_key(minor)[1] + 1,))
    # --no-binary: the package is only an sdist, and pip must not build it (we need its files)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "-d",
        download,
        f"{PACKAGE}>={minor},<{nxt}",
    ]
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        got = [f for f in os.listdir(download) if f.startswith(PACKAGE) and f.endswith(".tar.gz")]
        if p.returncode != 0 or not got:
            raise ValueError(f"pip could not download {PACKAGE} {minor}.x (log: {log.name})")
        version = got[0][len(PACKAGE) + 1 : -len(".tar.gz")]
        home = os.path.join(root, version)
        extract(os.path.join(download, got[0]), home)
        return home
    finally:
        shutil.rmtree(download, ignore_errors=True)  # 230 MB; the extracted jars are what is kept


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--cache", required=True, help="where the distribution goes (flink-dist/<version>/)"
    )
    ap.add_argument(
        "--flink", required=True, help="the Flink minor version (the job server's), e.g. 1.19"
    )
    a = ap.parse_args(argv)
    os.makedirs(a.cache, exist_ok=True)
    with open(os.path.join(a.cache, "flink-dist.log"), "a") as log:
        try:
            print(fetch(a.cache, a.flink, log))
        except (OSError, ValueError, tarfile.TarError) as e:
            print(f"cannot get the Flink {a.flink} distribution: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
