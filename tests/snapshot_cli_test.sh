#!/usr/bin/env bash
# `gphash snapshot`, `gphash restore`, the automatic-snapshot options and what `gphash info` says
# about snapshots, from the outside. Usage: snapshot_cli_test.sh PATH/TO/gphash
set -uo pipefail
gphash=$1
pool=gphash-snapshot-cli-test-$$
dir=$(mktemp -d /tmp/gphash-snapshot-cli-test-$$.XXXXXX)
trap 'rm -rf /dev/shm/$pool /dev/shm/$pool.* "$dir"' EXIT
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

expect 0 "info before any snapshot" -- "$gphash" create $pool
expect 0 "info" -- "$gphash" info $pool; contains "no snapshot" "snapshot       none: a reboot loses the pool"
expect 0 "load with a snapshot at the end" -- "$gphash" load $pool --records 20000 --no-progress --snapshot $dir/p.snap
contains "load" "snapshots: 1 taken to $dir/p.snap"
expect 0 "info after" -- "$gphash" info $pool; contains "info after" "a restart from it loses 0 writes"
[[ $(stat -c %a $dir/p.snap) == 600 ]] || { echo "FAIL: the snapshot file is not 0600"; fail=1; }
expect 0 "run a" -- "$gphash" run $pool --workload a --operations 20000 --no-progress
expect 0 "info says what a restart loses" -- "$gphash" info $pool --json; contains "json" '"writes_since_snapshot": [1-9]'
expect 0 "snapshot after unsnapshotted writes" -- "$gphash" snapshot $pool $dir/p.snap
contains "snapshot" "a full image"
expect 0 "snapshot again: nothing written since" -- "$gphash" snapshot $pool $dir/p.snap
contains "snapshot again" "delta 1 of its chain"
expect 0 "info after the snapshot" -- "$gphash" info $pool; contains "info again" "loses 0 writes"
rm /dev/shm/$pool
expect 0 "restore" -- "$gphash" restore $dir/p.snap $pool; contains "restore" "20000 items"
expect 0 "check the restored pool" -- "$gphash" check $pool; contains "check" "ok (20000 items)"
expect 1 "restore over a pool" -- "$gphash" restore $dir/p.snap $pool; contains "restore again" "exists"
expect 0 "restore --replace" -- "$gphash" restore $dir/p.snap $pool --replace --mode 0640
[[ $(stat -c %a /dev/shm/$pool) == 640 ]] || { echo "FAIL: the restored pool is not 0640"; fail=1; }
rm /dev/shm/$pool
expect 0 "run restores a missing pool from --snapshot" -- "$gphash" run $pool --workload c --operations 1000 --no-progress --snapshot $dir/p.snap
head -c 9000 /dev/urandom >$dir/bad.snap
expect 1 "restore a file that is not a snapshot" -- "$gphash" restore $dir/bad.snap $pool.2; contains "bad" "not a gphash snapshot file"
[[ -e /dev/shm/$pool.2 ]] && { echo "FAIL: a bad snapshot created a pool"; fail=1; }
expect 1 "snapshot into a file that is not a snapshot" -- "$gphash" snapshot $pool $dir/bad.snap; contains "bad target" "not a gphash snapshot file"
expect 0 "automatic snapshots every batch" -- "$gphash" load $pool.auto --records 50000 --batch 5000 --no-progress --snapshot $dir/auto.snap --snapshot-every-batches 1 --snapshot-mode 0640
contains "auto" "snapshots: [1-9][0-9]* taken"
[[ $(stat -c %a $dir/auto.snap) == 640 ]] || { echo "FAIL: --snapshot-mode was not applied"; fail=1; }
expect 2 "an interval of 0 seconds" -- "$gphash" load $pool.auto --records 10 --snapshot $dir/auto.snap --snapshot-every-seconds 0
contains "zero" "--snapshot-every-seconds"

[[ $fail -eq 0 ]] && echo "snapshot_cli_test: all passed"
exit $fail
