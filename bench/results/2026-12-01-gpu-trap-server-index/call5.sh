#!/usr/bin/env bash
# Session 36, call 5 (call 4's warm machine; run as this one command line, saved here): the CPU index
# started at 2^16, 2^18 (room for the 100 K keys without a resize) and 2^22 items, one run each.
B=$PWD/build-device/gpu; mkdir -p $OUT/r; cmake_args=(); source scripts/offline_deps.sh; offline_deps $PWD; srv="$B/gphash-server -t 8 -m 1024 -c 4096 --engine cpu"; LOADGEN=$B/gphash-server-loadgen timeout 140 bash bench/results/2026-12-01-gpu-trap-server-index/srv.sh $OUT/r/srv5.jsonl 1 "cpu16=$srv" "cpu18=$srv -o hashpower=18" "cpu22=$srv -o hashpower=22" > $OUT/r/srv5.log 2>&1; echo rc=$?; python3 bench/results/2026-12-01-gpu-trap-server-index/srv_table.py $OUT/r/srv5.jsonl
