#!/usr/bin/env bash
# aisnode (AIStore 5.0, Go module tag v1.5.0) for the AIS tests: one proxy + one target on
# 127.0.0.1 (tests/ais_fixtures.py).  Built with Go into $TAR2TF_CACHE/bin, module and
# build caches under $TAR2TF_CACHE, so reruns are instant.  Optional: if it cannot be
# built, warn loudly and exit 0 (the AIS tests then skip, saying why).
#
# Why `go mod download` + `go build` rather than `go install ...@v1.5.0`: both build the
# same tagged module with its own go.sum, but `go install pkg@version` first asks the
# module proxy for the module's version list (deprecation check), which some proxies
# refuse; downloading the exact version does not need the list.
set -uo pipefail
: "${TAR2TF_CACHE:?}"
MOD=github.com/NVIDIA/aistore
VER=v1.5.0
BIN="$TAR2TF_CACHE/bin/aisnode"
STAMP="$TAR2TF_CACHE/bin/.aisnode-$VER"
[[ -x "$BIN" && -f "$STAMP" ]] && exit 0

warn() {
  echo "############################################################################" >&2
  echo "## WARNING: aisnode $VER not installed: $*" >&2
  echo "## The AIStore tests will be SKIPPED.  Log: $TAR2TF_CACHE/aisnode-build.log" >&2
  echo "############################################################################" >&2
  exit 0
}
command -v go >/dev/null 2>&1 || warn "no 'go' toolchain on PATH"
mkdir -p "$TAR2TF_CACHE/bin"
export GOPATH="$TAR2TF_CACHE/go" GOCACHE="$TAR2TF_CACHE/gocache" GOFLAGS=-modcacherw CGO_ENABLED=0
log="$TAR2TF_CACHE/aisnode-build.log"
echo "building aisnode $VER (first time only, a few minutes; log: $log)" >&2
dir=$(go mod download -json "$MOD@$VER" 2>>"$log" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[[ -n "$dir" && -d "$dir" ]] || warn "go mod download $MOD@$VER failed"
if (cd "$dir" && go build -trimpath -o "$BIN.tmp" ./cmd/aisnode) >>"$log" 2>&1; then
  mv "$BIN.tmp" "$BIN" && touch "$STAMP"
else
  rm -f "$BIN.tmp"
  tail -n 20 "$log" >&2
  warn "go build failed"
fi
