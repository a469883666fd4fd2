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
expect 2 "run e" -- "$gphash" run $pool --workload e; contains "run e" "takes one of a, b, c, d, f"
expect 0 "check" -- "$gphash" check $pool; contains check "ok (20000 items)"
expect 0 "run without the tag mirror" -- "$gphash" run $pool --workload c --operations 20000 --tag-mirror off --no-progress
expect 2 "tag mirror neither on nor off" -- "$gphash" run $pool --workload c --tag-mirror maybe
expect 0 "run with a denser maximum load factor" -- "$gphash" run $pool --workload c --operations 20000 --max-load-factor 0.95 --no-progress
expect 2 "a maximum load factor above 1" -- "$gphash" run $pool --workload c --max-load-factor 1.5
printf 'not a pool at all' >/dev/shm/$pool.bad
expect 1 "check a file that is not a pool" -- "$gphash" check /dev/shm/$pool.bad; contains "bad pool" "not a gphash pool"
expect 1 "info on a missing pool" -- "$gphash" info /dev/shm/$pool.missing; contains missing "no pool"
expect 0 "bench, small" -- "$gphash" bench --pool $pool.bench --records 5000 --operations 5000 --no-progress
contains bench "not found"; contains bench "/dev/shm/$pool.bench"
rm -f /dev/shm/$pool.bench /dev/shm/$pool.bad

# A pool in use is never replaced or removed from under its writer (issue 15): a load runs in the
# background; `create --replace` and `bench --pool` on its pool are refused while it runs, and
# every record it loaded is there afterwards.
live=$pool.live
"$gphash" load $live --records 3000000 --batch 4096 --no-progress >/dev/null 2>&1 &
loader=$!
for _ in $(seq 1 200); do
  "$gphash" info $live 2>/dev/null | grep -q "open for writing by another process" && break
  sleep 0.05
done
if kill -0 $loader 2>/dev/null; then
  expect 1 "create --replace under a live writer" -- "$gphash" create $live --replace; contains "replace live" "in another process"
  expect 1 "bench over a live writer's pool" -- "$gphash" bench --pool $live --records 1000 --no-progress
  contains "bench live" "in another process"
  expect 0 "info while a writer holds the pool" -- "$gphash" info $live; contains "info live" "as of the last clean close"
else
  echo "FAIL: the background load ended before the test could race it"; fail=1
fi
wait $loader || { echo "FAIL: the background load failed"; fail=1; }
expect 0 "info after the load" -- "$gphash" info $live; contains "info after load" "items          3000000"
ls -l /dev/shm/$live | grep -q -- "-rw-------" || { echo "FAIL: pool is not 0600"; ls -l /dev/shm/$live; fail=1; }
expect 0 "check leaves a clean pool clean" -- "$gphash" check $live; contains "check live" "ok (3000000 items)"
expect 0 "repair of a consistent pool" -- "$gphash" repair $live; contains repair "nothing to drop"
expect 0 "convert of a current pool" -- "$gphash" convert $live; contains convert "already has the current format"
expect 2 "a bad thread count" -- "$gphash" check $live --threads 65536; contains "threads" "0..1024"
rm -f /dev/shm/$live
# Data tools (issue 8): put, get, del, stats, and dump -> import -> dump round trips.
data=$pool.data
expect 0 "create for data" -- "$gphash" create $data --key-width 16 --value-width 24
expect 0 "put" -- "$gphash" put $data alice "likes tea"; contains put "ok"
expect 0 "put hex" -- "$gphash" put $data --hex 626f62 0102ff; contains "put hex" "ok"
expect 0 "get" -- "$gphash" get $data alice; contains get "likes tea"
expect 0 "get hex" -- "$gphash" get $data 626f62 --hex; contains "get hex" "0102ff00"
expect 1 "get absent" -- "$gphash" get $data carol; contains "get absent" "not found"
expect 1 "key too long" -- "$gphash" put $data 0123456789abcdefX v; contains "key too long" "16 bytes"
expect 1 "value too long" -- "$gphash" put $data k 0123456789012345678901234; contains "value too long" "24 bytes"
expect 2 "bad hex" -- "$gphash" put $data --hex 6z v
expect 0 "del" -- "$gphash" del $data alice; contains del "deleted"
expect 1 "del absent" -- "$gphash" del $data alice; contains "del absent" "not found"
expect 0 "stats" -- "$gphash" stats $data; contains stats "1 in"
expect 0 "load more" -- "$gphash" load $data --records 3000 --no-progress
dumps=$(mktemp -d)
trap 'rm -f /dev/shm/$pool /dev/shm/$pool.*; rm -rf "$dumps"' EXIT
for format in jsonl binary; do
  expect 0 "dump $format" -- "$gphash" dump $data --format $format -o $dumps/a.$format
  ls -l $dumps/a.$format | grep -q -- "-rw-------" || { echo "FAIL: dump is not 0600"; fail=1; }
  expect 0 "create copy" -- "$gphash" create $data.copy --key-width 16 --value-width 24 --replace
  expect 0 "import $format" -- "$gphash" import $data.copy $dumps/a.$format; contains "import $format" "imported 3001 items"
  expect 0 "dump copy" -- "$gphash" dump $data.copy --format jsonl -o $dumps/b.jsonl
  "$gphash" dump $data --format jsonl -o $dumps/a2.jsonl >/dev/null 2>&1
  if ! diff <(sort $dumps/a2.jsonl) <(sort $dumps/b.jsonl) >/dev/null; then echo "FAIL: $format round trip differs"; fail=1; fi
done
head -c 200 $dumps/a.binary > $dumps/cut.binary
expect 1 "import a cut-off dump" -- "$gphash" import $data.copy $dumps/cut.binary; contains "cut dump" "corrupt\|not a usable"
head -n 5 $dumps/a.jsonl > $dumps/cut.jsonl
expect 1 "import a cut-off jsonl dump" -- "$gphash" import $data.copy $dumps/cut.jsonl; contains "cut jsonl" "end line is missing"
expect 0 "create narrow" -- "$gphash" create $data.narrow --key-width 8
expect 1 "import into other widths" -- "$gphash" import $data.narrow $dumps/a.jsonl; contains "width import" "key width mismatch"
expect 0 "info of the untouched copy" -- "$gphash" info $data.narrow; contains "narrow" "items          0"
rm -f /dev/shm/$data /dev/shm/$data.copy /dev/shm/$data.narrow

# HMEH pools: created with --index hmeh, then the same tools; a dump moves between the two indexes.
hm=$pool.hmeh
expect 2 "hmeh with 32-byte keys" -- "$gphash" create $hm --index hmeh --key-width 32; contains "hmeh 32" "use 8 or 16"
expect 2 "no such index" -- "$gphash" create $hm --index btree
expect 0 "create hmeh" -- "$gphash" create $hm --index hmeh --key-width 16 --value-width 24; contains "create hmeh" "hmeh, 16-byte keys"
expect 0 "info hmeh" -- "$gphash" info $hm; contains "info hmeh" "table          hmeh"
expect 0 "info hmeh --json" -- "$gphash" info $hm --json; contains "info hmeh json" '"index": "hmeh"'
expect 0 "put hmeh" -- "$gphash" put $hm bob builder; contains "put hmeh" "ok"
expect 0 "get hmeh" -- "$gphash" get $hm bob; contains "get hmeh" "builder"
expect 0 "load hmeh" -- "$gphash" load $hm --records 3000 --no-progress
expect 0 "stats hmeh" -- "$gphash" stats $hm; contains "stats hmeh" "segments"
expect 0 "check hmeh" -- "$gphash" check $hm; contains "check hmeh" "ok (3001 items)"
expect 2 "gpu engine on hmeh" -- "$gphash" get $hm bob --engine gpu; contains "gpu on hmeh" "use the CPU engine"
expect 0 "dump hmeh" -- "$gphash" dump $hm --format binary -o $dumps/h.binary
expect 0 "import hmeh into gphash" -- "$gphash" create $data.g --key-width 16 --value-width 24
expect 0 "import hmeh dump" -- "$gphash" import $data.g $dumps/h.binary; contains "import hmeh" "imported 3001 items"
expect 0 "gphash pool has hmeh's items" -- "$gphash" get $data.g bob; contains "hmeh to gphash" "builder"
expect 0 "dump the gphash copy" -- "$gphash" dump $data.g -o $dumps/g.jsonl
expect 0 "create hmeh copy" -- "$gphash" create $hm.copy --index hmeh --key-width 16 --value-width 24
expect 0 "import into hmeh" -- "$gphash" import $hm.copy $dumps/g.jsonl; contains "import into hmeh" "imported 3001 items"
"$gphash" dump $hm.copy -o $dumps/h2.jsonl >/dev/null 2>&1
if ! diff <(sort $dumps/g.jsonl) <(sort $dumps/h2.jsonl) >/dev/null; then echo "FAIL: hmeh round trip differs"; fail=1; fi
expect 0 "repair a sound hmeh pool" -- "$gphash" repair $hm; contains "repair hmeh" "3001 items"
expect 0 "convert hmeh" -- "$gphash" convert $hm; contains "convert hmeh" "already has the current format"
expect 0 "bench hmeh, small" -- "$gphash" bench --pool $hm.bench --index hmeh --records 5000 --operations 5000 --no-progress
contains "bench hmeh" "table hmeh"; contains "bench hmeh" "5000 items"
expect 0 "check the bench pool" -- "$gphash" check $hm.bench; contains "check hmeh bench" "ok (5000 items)"
expect 2 "hmeh segment not a power of two" -- "$gphash" create $hm.shape --index hmeh --segment-bytes 5000
contains "hmeh segment" "not a power of two"
expect 0 "hmeh shape options" -- "$gphash" load $hm.shape --index hmeh --segment-bytes 4096 --probe-buckets 2 --stash-buckets 0 --records 3000 --no-progress
expect 0 "check hmeh shape" -- "$gphash" check $hm.shape; contains "check hmeh shape" "ok (3000 items)"
rm -f /dev/shm/$hm /dev/shm/$hm.copy /dev/shm/$hm.bench /dev/shm/$hm.shape /dev/shm/$data.g

[[ $fail -eq 0 ]] && echo "cli_test: all passed"
exit $fail
