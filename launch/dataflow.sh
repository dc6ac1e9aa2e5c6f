#!/usr/bin/env bash
# Run `tar2tf convert` (or, with a first argument `pcr`, `tar2tf pcr`) on Google Cloud
# Dataflow.  See docs/runners.md.
#
#   PROJECT=my-project REGION=europe-west4 TEMP_LOCATION=gs://my-bucket/tmp \
#     launch/dataflow.sh 'gs://my-bucket/train-{0000..0147}.tar' \
#       --output gs://my-bucket/tfrecords/train-{}.record --max-shard-size 100MB --type-map cls:int64
#
# Everything after the script name (and an optional first `convert` or `pcr`) is passed to
# `tar2tf convert` (`tar2tf pcr`) (tar2tf options and extra
# Beam options such as --max_num_workers=50 or --machine_type=n2-standard-4).  Added here:
#   --runner=DataflowRunner --project=$PROJECT --region=$REGION --temp_location=$TEMP_LOCATION
# and how workers get tar2tf, chosen by DEPS:
#   DEPS=setup (default)  --setup_file=<repo>/setup.py: Beam builds an sdist of this tree
#                         (python setup.py sdist) and every worker pip-installs it with its
#                         dependencies from pyproject.toml.
#   DEPS=requirements     --requirements_file=$REQUIREMENTS_FILE (third-party packages, pip
#                         downloaded and staged at submission) + --extra_package=$EXTRA_PACKAGE
#                         (tar2tf itself: an sdist or wheel you built, e.g. `pip wheel --no-deps .`).
#   DEPS=container        --sdk_container_image=$SDK_CONTAINER_IMAGE: an image FROM
#                         apache/beam_python3.11_sdk:<beam version> with `pip install .` done
#                         at build time; nothing is installed at worker start (fastest start).
# --dry-run: print what Beam would be given (as parsed by Beam's PipelineOptions) and the
# problems found, and exit (0 = fine, 2 = problems); no job is submitted.
# Python: $TAR2TF_PYTHON, else the bootstrap venv (launch/bootstrap.sh --core).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=launch/script_flags.sh
source "$ROOT/launch/script_flags.sh"
script_flags "${BASH_SOURCE[0]}" "$@"
set -- ${rest[@]+"${rest[@]}"}
PROJECT=${PROJECT:-${GOOGLE_CLOUD_PROJECT:-}}
REGION=${REGION:-us-central1}
TEMP_LOCATION=${TEMP_LOCATION:-}
DEPS=${DEPS:-setup}
missing=()
[[ -n "$PROJECT" ]] || missing+=(PROJECT)
[[ -n "$TEMP_LOCATION" ]] || missing+=(TEMP_LOCATION)
if ((${#missing[@]})); then
  echo "launch/dataflow.sh: set ${missing[*]} (e.g. PROJECT=my-project TEMP_LOCATION=gs://my-bucket/tmp)" >&2
  exit 2
fi
args=(--runner=DataflowRunner "--project=$PROJECT" "--region=$REGION" "--temp_location=$TEMP_LOCATION")
case "$DEPS" in
  setup) args+=("--setup_file=$ROOT/setup.py") ;;
  requirements)
    : "${REQUIREMENTS_FILE:?DEPS=requirements needs REQUIREMENTS_FILE}" "${EXTRA_PACKAGE:?DEPS=requirements needs EXTRA_PACKAGE (a built tar2tf sdist or wheel)}"
    args+=("--requirements_file=$REQUIREMENTS_FILE" "--extra_package=$EXTRA_PACKAGE") ;;
  container)
    : "${SDK_CONTAINER_IMAGE:?DEPS=container needs SDK_CONTAINER_IMAGE}"
    args+=("--sdk_container_image=$SDK_CONTAINER_IMAGE" "--sdk_location=container") ;;
  *) echo "launch/dataflow.sh: DEPS must be setup, requirements or container, not '$DEPS'" >&2; exit 2 ;;
esac
PY=${TAR2TF_PYTHON:-$("$ROOT/launch/bootstrap.sh" --core | tail -n 1)}
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
if ((dry)); then
  exec "$PY" -m launch.dry_run "$cmd" "$@" "${args[@]}"
fi
exec "$PY" -m launch.cli "$cmd" "$@" "${args[@]}"
