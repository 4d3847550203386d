#!/usr/bin/env bash
# Every finding of vrh on the shipped organisms, one run folder each, plus one report.
# Usage: bash scripts/organism_findings.sh [OUT]   (default runs/findings; ~4.5 min on 2 CPU cores)
set -euo pipefail
OUT=${1:-runs/findings}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
K=${K:-3}
N=${N:-200}
A=${A:-organism:organism_a}
B=${B:-organism:organism_b}
vrh demo --model "$A" --out "$OUT/demo" --n-detect "$N" --n-eval "$N" --n-vqa "$N" --k "$K"
D="$OUT/demo/data/grounding.jsonl"
# detection with both token choices (Fig. 8b) on A, and B's own detection (transfer)
vrh detect --model "$A" --data "$D" --n "$N" --scorers out/sum/mean,rand1/sum/mean --out "$OUT/det_a" --overwrite
vrh detect --model "$B" --data "$D" --n "$N" --out "$OUT/det_b" --overwrite
vrh transfer --heads "$OUT/det_a" --heads-b "$OUT/det_b" --model "$B" --data "$D" --k "$K" --out "$OUT/transfer" --overwrite
vrh stability --heads "$OUT/det_a" --model "$A" --data "$D" --k "$K" --out "$OUT/stability" --overwrite
vrh compare --model "$A" --data "$D" --n "$N" --ks "1,$K,$((2 * K))" --out "$OUT/compare" --overwrite
vrh sweep --model "$A" --data "$D" --heads "$OUT/det_a" --ks "0,1,$K,$((2 * K))" --mask-mode uniform --out "$OUT/sweep_uniform" --overwrite
vrh dpo-pairs --model "$A" --heads "$OUT/det_a" --data "$D" --k "$K" --out "$OUT/dpo" --overwrite
vrh report "$OUT/demo" "$OUT/demo/detect" "$OUT/demo/sweep_grounding" "$OUT/demo/sweep_vqa" "$OUT/det_a" \
    "$OUT/det_b" "$OUT/transfer" "$OUT/stability" "$OUT/compare" "$OUT/sweep_uniform" --k "$K" --out "$OUT/report"
python "$(dirname "$0")/organism_acceptance.py" "$OUT" --json "$OUT/acceptance.json"
echo "findings in $OUT; report: $OUT/report/report.html"
