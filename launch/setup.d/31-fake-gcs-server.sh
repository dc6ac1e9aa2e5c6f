#!/usr/bin/env bash
# fake-gcs-server (a GCS JSON/XML API emulator) for the GCS tests, which drive it with the
# real google-cloud-storage client on 127.0.0.1 (tests/support/gcs_fixtures.py).  Built with Go into
# $TAR2TF_CACHE/bin; see go-tool.bash.
# Only tests marked with this marker need it: tests/run.sh with a selection skips it otherwise
# setup-for-marker: gcs
set -uo pipefail
: "${TAR2TF_CACHE:?}"
source "$(dirname "${BASH_SOURCE[0]}")/go-tool.bash"
build_go_tool fake-gcs-server github.com/fsouza/fake-gcs-server v1.56.1 . GCS
