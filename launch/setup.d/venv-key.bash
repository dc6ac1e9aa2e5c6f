# Sourced (not a step itself: the bootstrap runs only *.sh) by launch/setup.d/10-venv.sh,
# which builds the venv, and launch/venv.sh, which finds it: one rule for where a
# checkout's venv lives.  venv_locate sets
#   VENV_PINS  the constraints file pip installs with (/dev/null on a Python other than
#              3.11, where the pins were resolved: it resolves within pyproject's ranges)
#   VENV_DIR   $TAR2TF_CACHE/venv-<key>, the key a hash of the dependency lists, the pins
#              and the Python version only, so that editing other metadata reuses the venv
# from $TAR2TF_CACHE, $TAR2TF_ROOT and $PYTHON (default python3).
venv_locate() {
  local py=${PYTHON:-python3} key
  VENV_PINS="$TAR2TF_ROOT/launch/constraints.txt"
  if [[ $($py -c 'import sys; print("%d.%d" % sys.version_info[:2])') != 3.11 ]]; then
    VENV_PINS=/dev/null
  fi
  key=$( (sed -n '/^dependencies = \[/,/^\[project.scripts\]/p' "$TAR2TF_ROOT/pyproject.toml"
          grep -v '^#' "$VENV_PINS"
          $py -c 'import sys; print(sys.version)') | sha256sum | cut -c1-12)
  VENV_DIR="$TAR2TF_CACHE/venv-$key"
}
