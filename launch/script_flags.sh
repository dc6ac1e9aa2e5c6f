# Sourced by launch/flink.sh and launch/dataflow.sh: their own flags, wherever they stand
# among the arguments (a misplaced --dry-run must never reach Beam and submit a job):
#   script_flags "${BASH_SOURCE[0]}" "$@"; set -- ${rest[@]+"${rest[@]}"}
# sets dry=1 for --dry-run, prints the calling script's header comment for -h/--help and
# exits, sets cmd to the tar2tf subcommand (a first argument `convert` or `pcr`; default
# convert), and leaves every other argument, in order, in the array rest.
script_flags() {
  local script=$1 a
  shift
  dry=0
  rest=()
  for a in "$@"; do
    case "$a" in
      --dry-run) dry=1 ;;
      -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$script"; exit 0 ;;
      *) rest+=("$a") ;;
    esac
  done
  cmd=convert
  if ((${#rest[@]})) && [[ "${rest[0]}" == convert || "${rest[0]}" == pcr ]]; then
    cmd=${rest[0]}
    rest=("${rest[@]:1}")
  fi
}
