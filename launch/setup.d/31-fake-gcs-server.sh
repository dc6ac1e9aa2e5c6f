#!/usr/bin/env bash
# fake-gcs-server (a GCS JSON/XML API emulator) for the GCS tests, which drive it with the
# real google-cloud-storage client on 127.0.0.1 (tests/gcs_fixtures.py).  Built with Go
# into $TAR2TF_CACHE/bin (caches under $TAR2TF_CACHE).  Optional: if it cannot be built,
# warn loudly and exit 0 (the GCS tests then skip, saying why).  Same download-then-build
# reason as 30-aisnode.sh.
set -uo pipefail
: "${TAR2TF_CACHE:?}"
MOD=github.com/fsouza/fake-gcs-server
VER=v1.56.1
BIN="$TAR2TF_CACHE/bin/fake-gcs-server"
STAMP="$TAR2TF_CACHE/bin/.fake-gcs-server-$VER"
[[ -x "$BIN" && -f "$STAMP" ]] && exit 0

warn() {
  echo "############################################################################" >&2
  echo "## WARNING: fake-gcs-server $VER not installed: $*" >&2
  echo "## The GCS tests will be SKIPPED.  Log: $TAR2TF_CACHE/fake-gcs-build.log" >&2
  echo "############################################################################" >&2
  exit 0
}
command -v go >/dev/null 2>&1 || warn "no 'go' toolchain on PATH"
mkdir -p "$TAR2TF_CACHE/bin"
export GOPATH="$TAR2TF_CACHE/go" GOCACHE="$TAR2TF_CACHE/gocache" GOFLAGS=-modcacherw CGO_ENABLED=0
log="$TAR2TF_CACHE/fake-gcs-build.log"
echo "building fake-gcs-server $VER (first time only; log: $log)" >&2
dir=$(go mod download -json "$MOD@$VER" 2>>"$log" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[[ -n "$dir" && -d "$dir" ]] || warn "go mod download $MOD@$VER failed"
if (cd "$dir" && go build -trimpath -o "$BIN.tmp" .) >>"$log" 2>&1; then
  mv "$BIN.tmp" "$BIN" && touch "$STAMP"
else
  rm -f "$BIN.tmp"
  tail -n 20 "$log" >&2
  warn "go build failed"
fi
