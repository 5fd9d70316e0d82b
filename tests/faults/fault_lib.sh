# tests/faults/fault_lib.sh - helpers of the fault-tolerance tests (sourced after tests/lib.sh and
# tests/cli/train_lib.sh).
#   debug_deck NAME "DEBUG KEYS" KEY=VALUE...   train_deck NAME KEY=VALUE... plus a &debug group
#   bg_start OUT CMD...       run CMD in the background, output in OUT; $bg is its pid
#   wait_for OUT REGEX SECS   wait until OUT matches REGEX (status 1 after SECS seconds)
#   bg_finish                 wait for $bg: $rc its status, $out its output
#   bounded CODE CMD...       expect_exit CODE CMD..., under a guard that ends CMD after 600 s
#   attr FILE NAME            a root attribute of an HDF5 file (strings without quotes)
#   no_tmp DIR...             fail when a DIR holds a temporary file (*.tmp.*)
#   same_log A B              the train_loss lines of two log.txt files are the same
# Every launch has a time limit, so that a bug makes the test fail instead of hanging the suite; the
# limits are far above what these tiny runs take on a loaded machine, and no verdict depends on a
# duration: a run that should end must end (status, message), whatever the machine's speed.

debug_deck() {
  name=$1 dbg=$2; shift 2
  train_deck "$name" "$@"
  echo "&debug $dbg /"
}

now() { date +%s.%N; }

# (Not under `timeout`, which would take the signals meant for CMD: a guard kills CMD after 600 s.)
bg_start() {
  o=$1; shift
  "$@" >"$o" 2>&1 </dev/null &
  bg=$!
  bg_out=$o
  # the guard ends by itself within a second of CMD
  (timeout 600 tail --pid="$bg" -f /dev/null || kill -9 "$bg") >/dev/null 2>&1 &
}

wait_for() {
  n=0
  while ! grep -E -q -e "$2" "$1" 2>/dev/null; do
    n=$((n + 1))
    [ $n -gt $(($3 * 10)) ] && return 1
    sleep 0.1
  done
  return 0
}

bg_finish() {
  wait "$bg"; rc=$?
  out=$(cat "$bg_out")
}

bounded() {
  want=$1; shift
  expect_exit "$want" timeout -k 5 600 "$@"
}

attr() {
  h5dump -a "/$2" "$1" 2>/dev/null | sed -n 's/^ *(0): *//p' | tr -d '"'
}

no_tmp() {
  nchecks=$((nchecks + 1))
  for d in "$@"; do
    if ls -a "$d" | grep -q '\.tmp\.'; then
      fail "temporary files left in $d: $(ls -a "$d" | grep '\.tmp\.' | tr '\n' ' ')"
    fi
  done
}

same_log() {
  for line in 1 2; do
    nchecks=$((nchecks + 1))
    a=$(json_field "$1" $line train_loss)
    b=$(json_field "$2" $line train_loss)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "$2 line $line: train_loss $b, uninterrupted run $a"
  done
}
