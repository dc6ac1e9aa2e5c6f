# Sourced by the setup steps that build a Go program for the tests (not a step itself: the
# bootstrap runs only *.sh).  build_go_tool NAME MODULE VERSION PACKAGE TESTS-WHAT
#
# Downloads exactly MODULE@VERSION and builds PACKAGE into $TAR2TF_CACHE/bin/NAME, with the
# module and build caches under $TAR2TF_CACHE, so reruns are instant.  Why `go mod download`
# + `go build` rather than `go install MODULE/PACKAGE@VERSION`: both build the same tagged
# module with its own go.sum, but `go install pkg@version` first asks the module proxy for
# the module's version list (a deprecation check), which the proxy here refuses (403);
# downloading the exact version does not need the list.  The tools are optional on a
# developer's machine: if one cannot be built, warn loudly and exit 0, and the tests that
# need it skip, saying why.  In CI (CI=true) the step fails instead: nothing skips quietly.
build_go_tool() {
  local name=$1 mod=$2 ver=$3 pkg=$4 what=$5
  local bin="$TAR2TF_CACHE/bin/$name" stamp="$TAR2TF_CACHE/bin/.$name-$ver"
  local log="$TAR2TF_CACHE/$name-build.log" dir
  [[ -x "$bin" && -f "$stamp" ]] && exit 0
  warn() {
    echo "############################################################################" >&2
    echo "## WARNING: $name $ver not installed: $*" >&2
    echo "## The $what tests will be SKIPPED (FAIL under CI=true).  Log: $log" >&2
    echo "############################################################################" >&2
    [[ "${CI:-}" == "true" ]] && exit 1
    exit 0
  }
  command -v go >/dev/null 2>&1 || warn "no 'go' toolchain on PATH"
  mkdir -p "$TAR2TF_CACHE/bin"
  export GOPATH="$TAR2TF_CACHE/go" GOCACHE="$TAR2TF_CACHE/gocache" GOFLAGS=-modcacherw CGO_ENABLED=0
  echo "building $name $ver (first time only, up to a few minutes; log: $log)" >&2
  dir=$(go mod download -json "$mod@$ver" 2>>"$log" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  [[ -n "$dir" && -d "$dir" ]] || warn "go mod download $mod@$ver failed"
  if (cd "$dir" && go build -trimpath -o "$bin.tmp" "$pkg") >>"$log" 2>&1; then
    mv "$bin.tmp" "$bin" && touch "$stamp"
  else
    rm -f "$bin.tmp"
    tail -n 20 "$log" >&2
    warn "go build failed"
  fi
}
