#!/usr/bin/env bash
# aisnode (AIStore 5.0, Go module tag v1.5.0) for the AIS tests: one proxy + one target on
# 127.0.0.1 (tests/support/ais_fixtures.py).  Built with Go into $TAR2TF_CACHE/bin; see go-tool.bash
# for how and why (the equivalent of `go install github.com/NVIDIA/aistore/cmd/aisnode@v1.5.0`).
# Only tests marked with this marker need it: tests/run.sh with a selection skips it otherwise
# setup-for-marker: ais
set -uo pipefail
: "${TAR2TF_CACHE:?}"
source "$(dirname "${BASH_SOURCE[0]}")/go-tool.bash"
build_go_tool aisnode github.com/NVIDIA/aistore v1.5.0 ./cmd/aisnode AIStore
