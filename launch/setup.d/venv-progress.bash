# Sourced (not a step itself: the bootstrap runs only *.sh) by launch/setup.d/10-venv.sh,
# whose ticker prints one line every 10 s while pip installs.  A first install fetches and
# unpacks about 3.5 GB for a minute or two; a line that repeats the same words for 90 s
# looks like a hang, so each line carries numbers that move:
#   fetching:   packages collected so far and the bytes of their wheels (pip's log gives
#               each wheel's size as it starts it)
#   installing: packages installed of the total pip announced, counted by the .dist-info
#               directories newer than the stamp the caller made before pip started (one
#               a package, written as pip finishes it), and the venv's size on disk
# venv_progress LOG FIRST-LINE STAMP VENV prints that line (without the "[venv] N s: ").
venv_progress() {
  local log=$1 first=$2 stamp=$3 venv=$4 mine n total got mb
  mine=$(tail -n +"$first" "$log" 2>/dev/null)  # this pip's lines only
  n=$(grep -c '^Collecting ' <<<"$mine" || true)
  total=$(grep -m1 '^Installing collected packages: ' <<<"$mine" | tr -cd , | wc -c)
  if grep -q '^Installing collected packages: ' <<<"$mine"; then
    total=$((total + 1))  # a comma-separated list
    got=$(find "$venv"/lib/python3*/site-packages -maxdepth 1 -name '*.dist-info' \
             -newer "$stamp" 2>/dev/null | wc -l)
    ((got > total)) && got=$total
    mb=$(du -sm "$venv" 2>/dev/null | cut -f1)
    echo "installing: $got of $total packages, venv ${mb:-0} MB"
  else
    # "  Downloading name.whl (572.4 MB)", also for a wheel pip had cached
    mb=$(sed -n 's/.*\(Downloading\|Using cached\) .* (\([0-9.]*\) \([kMG]\)B)$/\2 \3/p' <<<"$mine" |
         awk '{ f = ($2 == "k") ? 1 / 1024 : ($2 == "G") ? 1024 : 1; s += $1 * f }
              END { printf "%d", s }')
    echo "fetching: $n packages, ${mb:-0} MB so far"
  fi
}
