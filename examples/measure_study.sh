#!/usr/bin/env bash
# The shipped example study's times: one `vrh study run` (model loaded once per model, each detection shared),
# its rerun (nothing to do), and the same cells as separate `vrh` commands (`vrh study plan --commands`: one
# process and one model load per command) on the same prepared datasets. Each line: wall seconds and CPU seconds.
# Usage: bash examples/measure_study.sh [OUT]   (default /tmp/vrh_study_measure; OUT is replaced)
set -euo pipefail
OUT=${1:-/tmp/vrh_study_measure}
STUDY=${STUDY:-examples/organism_study.toml}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE VRH_NO_PROGRESS=1
rm -rf "$OUT" && mkdir -p "$OUT"
timed() {  # timed NAME CMD...: appends "NAME wall_s cpu_s" to $OUT/times.txt
    local name=$1; shift
    /usr/bin/time -f "$name %e %U %S" -o "$OUT/.t" "$@" > "$OUT/$name.log" 2>&1
    awk '{printf "%s wall %.1f s, cpu %.1f s\n", $1, $2, $3 + $4}' "$OUT/.t" | tee -a "$OUT/times.txt"
}
timed study vrh study run "$STUDY" --out "$OUT/study"
timed rerun vrh study run "$STUDY" --out "$OUT/study"
mkdir -p "$OUT/separate" && cp -r "$OUT/study/data" "$OUT/separate/data"
vrh study plan "$STUDY" --out "$OUT/separate" --commands | grep -v '^#' > "$OUT/commands.sh"
timed separate bash -e "$OUT/commands.sh"
echo "cells: $(wc -l < "$OUT/commands.sh") commands; times in $OUT/times.txt"
