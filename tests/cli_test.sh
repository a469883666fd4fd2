#!/usr/bin/env bash
# The gphash command from the outside: every subcommand, its output and its exit status.
# Usage: cli_test.sh PATH/TO/gphash
set -uo pipefail
gphash=$1
pool=gphash-cli-test-$$
trap 'rm -f /dev/shm/$pool /dev/shm/$pool.*' EXIT
fail=0
expect() {  # expect STATUS DESCRIPTION -- command...
  local want=$1 what=$2; shift 3
  local out
  out=$("$@" 2>&1)
  local got=$?
  if [[ $got -ne $want ]]; then
    echo "FAIL: $what: exit $got, expected $want"; echo "$out" | head -5; fail=1
  fi
  LAST=$out
}
contains() { grep -q -- "$2" <<<"$LAST" || { echo "FAIL: $1: output lacks '$2'"; echo "$LAST" | head -5; fail=1; }; }

expect 0 "help" -- "$gphash" --help; contains help "create"
expect 0 "subcommand help" -- "$gphash" bench --help; contains "bench help" "--records"
expect 2 "no subcommand" -- "$gphash"
expect 2 "unknown option" -- "$gphash" create $pool --no-such-option
expect 2 "create without POOL" -- "$gphash" create
expect 0 "create with defaults" -- "$gphash" create $pool; contains create "/dev/shm/$pool"
expect 1 "create over an existing pool" -- "$gphash" create $pool; contains "create again" "exists"
expect 0 "info" -- "$gphash" info $pool; contains info "2L-2H-8S"
expect 0 "info --json" -- "$gphash" info $pool --json; contains "info json" '"key_width": 8'
expect 0 "load" -- "$gphash" load $pool --records 20000 --no-progress; contains load "load"
expect 0 "run a" -- "$gphash" run $pool --workload a --operations 20000 --no-progress
expect 2 "run e" -- "$gphash" run $pool --workload e; contains "run e" "range scan"
expect 0 "check" -- "$gphash" check $pool; contains check "ok (20000 items)"
printf 'not a pool at all' >/dev/shm/$pool.bad
expect 1 "check a file that is not a pool" -- "$gphash" check /dev/shm/$pool.bad; contains "bad pool" "not a gphash pool"
expect 1 "info on a missing pool" -- "$gphash" info /dev/shm/$pool.missing; contains missing "no pool"
expect 0 "bench, small" -- "$gphash" bench --pool $pool.bench --records 5000 --operations 5000 --no-progress
contains bench "not found"; contains bench "/dev/shm/$pool.bench"
rm -f /dev/shm/$pool.bench /dev/shm/$pool.bad
[[ $fail -eq 0 ]] && echo "cli_test: all passed"
exit $fail
