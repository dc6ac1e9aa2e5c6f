#!/usr/bin/env bash
# System packages from Debian/Ubuntu apt: jpegtran (libjpeg-turbo-progs), used by the PCR
# converter for lossless baseline -> progressive JPEG transcoding.
# Fast when done (one `command -v`); never fails the bootstrap: if jpegtran cannot be
# installed, print a loud warning and exit 0 -- the PCR tests then skip with a reason
# (under CI=true it fails instead).
set -uo pipefail

if command -v jpegtran >/dev/null 2>&1; then
  exit 0
fi

warn() {
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
  echo "!!! WARNING: jpegtran is missing and could not be installed: $1" >&2
  echo "!!! tar2tf pcr (Progressive Compressed Records) will not work; its tests will skip." >&2
  echo "!!! Install it by hand: apt-get install libjpeg-turbo-progs" >&2
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
  # optional on a developer's machine; in CI (CI=true) the run fails instead
  if [[ "${CI:-}" == "true" ]]; then exit 1; fi
  exit 0
}

command -v apt-get >/dev/null 2>&1 || warn "no apt-get on this system"
SUDO=""
if [[ "$(id -u)" != 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    warn "not root and no password-less sudo"
  fi
fi

log="${TAR2TF_CACHE:-/tmp}/apt-install.log"
# other setup steps or users may hold the dpkg lock for a while: wait for it
apt_opts=(-o DPkg::Lock::Timeout=300 -y -q)
echo "installing libjpeg-turbo-progs (jpegtran) with apt-get (log: $log)" >&2
if ! { $SUDO apt-get "${apt_opts[@]}" update \
       && DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${apt_opts[@]}" install --no-install-recommends \
            libjpeg-turbo-progs; } >"$log" 2>&1; then
  tail -n 15 "$log" >&2
  warn "apt-get failed (see $log)"
fi
command -v jpegtran >/dev/null 2>&1 || warn "apt-get succeeded but jpegtran is not on PATH"
exit 0
