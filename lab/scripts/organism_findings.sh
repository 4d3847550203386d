#!/usr/bin/env bash
# Every finding of vrh on the shipped organisms, one run folder each, plus one report.
# Usage: bash lab/scripts/organism_findings.sh [OUT]   (default runs/findings; 12 min 57 s for A, B, C and C' on 2 CPU cores,
# measured 2026-12-03 with issue 38's text-heads and compare-heads runs)
# Organism C (an independently trained LM on A's architecture, no planted heads) runs when its checkpoint
# resolves: C=${C:-organism:organism_c}, e.g. C=path/to/organism_c bash lab/scripts/organism_findings.sh OUT.
set -euo pipefail
OUT=${1:-runs/findings}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
K=${K:-3}
N=${N:-200}
A=${A:-organism:organism_a}
B=${B:-organism:organism_b}
C=${C:-organism:organism_c}
CP=${CP:-organism:organism_c_prime}
C_KS=${C_KS:-0,1,2,3,4,5,6,7,8}  # C's k-sweep: k = 1 up to 25% of its 32 heads
vrh demo --model "$A" --out "$OUT/demo" --n-detect "$N" --n-eval "$N" --n-vqa "$N" --k "$K" --overwrite
D="$OUT/demo/data/grounding.jsonl"
# detection with both token choices (Fig. 8b) on A, and B's own detection (transfer)
vrh detect --model "$A" --data "$D" --n "$N" --scorers out/sum/mean,rand1/sum/mean --out "$OUT/det_a" --overwrite
vrh detect --model "$B" --data "$D" --n "$N" --out "$OUT/det_b" --overwrite
vrh transfer --heads "$OUT/det_a" --heads-b "$OUT/det_b" --model "$B" --data "$D" --k "$K" --out "$OUT/transfer" --overwrite
vrh stability --heads "$OUT/det_a" --model "$A" --data "$D" --k "$K" --out "$OUT/stability" --overwrite
vrh compare --model "$A" --data "$D" --n "$N" --ks "1,$K,$((2 * K))" --out "$OUT/compare" --overwrite
vrh sweep --model "$A" --data "$D" --heads "$OUT/det_a" --ks "0,1,$K,$((2 * K))" --mask-mode uniform --out "$OUT/sweep_uniform" --overwrite
vrh dpo-pairs --model "$A" --heads "$OUT/det_a" --data "$D" --k "$K" --out "$OUT/dpo" --overwrite
# A on RH's needle test (issue 38): A never saw a text job; the same prompts as C's below
TEXT_OPTS=(--haystack items --contexts 42,54,66 --depths 0,0.5,1 --needles 20 --k "$K" --max-new-tokens 16)
vrh text-heads --model "$A" "${TEXT_OPTS[@]}" --cross-heads "$OUT/det_a" --out "$OUT/text_a" --overwrite

# --- organism C (issue 17). Its demo writes the same world samples as A's (same seed), so its detection
# (demo_c/detect) and det_a share a dataset and a held-out split, and C's other runs use $D too.
# Transfer between A and C masks heads across two language models that share no weights: vrh transfer only
# requires the same (layers, heads) grid, and the paper's account predicts A's heads act like random ones in
# C (and C's in A) -- the negative control beside A -> B. Its random heads are drawn outside both models'
# top-k (the acceptance checker still counts random sets holding the target's own top-k: it must be 0).
# C's training log (emergence.jsonl in its checkpoint folder) becomes a run folder for the report.
C_RUNS=("$OUT/demo_c" "$OUT/demo_c/detect" "$OUT/demo_c/sweep_grounding" "$OUT/demo_c/sweep_vqa" "$OUT/compare_c"
        "$OUT/transfer_a_to_c" "$OUT/transfer_c_to_a")
# the checkpoint folder a --model value names, or "" when it names none (a missing organism)
model_dir() {
    python - "$1" <<'PY'
import sys
from pathlib import Path

from vrh.models.loading import resolve_model_path

try:
    path = Path(resolve_model_path(sys.argv[1]))
except FileNotFoundError:  # organism:NAME that this install does not have
    path = None
print(path if path is not None and (path / "config.json").is_file() else "")
PY
}
C_DIR=$(model_dir "$C")
if [[ -n "$C_DIR" ]]; then
    vrh demo --model "$C" --out "$OUT/demo_c" --n-detect "$N" --n-eval "$N" --n-vqa "$N" --k "$K" --ks "$C_KS" --overwrite
    vrh compare --model "$C" --data "$D" --n "$N" --ks "1,$K,$((2 * K))" --out "$OUT/compare_c" --overwrite
    vrh transfer --heads "$OUT/det_a" --heads-b "$OUT/demo_c/detect" --model "$C" --data "$D" --k "$K" \
        --out "$OUT/transfer_a_to_c" --overwrite
    vrh transfer --heads "$OUT/demo_c/detect" --heads-b "$OUT/det_a" --model "$A" --data "$D" --k "$K" \
        --out "$OUT/transfer_c_to_a" --overwrite
    # C' (C's LM fine-tuned on tower B, as B is on A's): the positive control of the same transfer test
    # text retrieval heads vs VRHs (issue 38; docs/organism.md): RH's needle test on text alone in the format of
    # C's text jobs, then the overlap of the two rankings with chance levels and the cross-masking matrix
    vrh detect --model "$C" --data "$D" --n "$N" --out "$OUT/det_c" --overwrite
    vrh text-heads --model "$C" "${TEXT_OPTS[@]}" --cross-heads "$OUT/det_c" --out "$OUT/text_c" --overwrite
    vrh compare-heads --heads "$OUT/det_c" --heads-b "$OUT/text_c" --model "$C" --data "$D" --k "$K" \
        --max-new-tokens 24 --out "$OUT/cmp_c" --overwrite
    C_RUNS+=("$OUT/det_c" "$OUT/text_c" "$OUT/cmp_c")
    CP_DIR=$(model_dir "$CP")
    if [[ -n "$CP_DIR" ]]; then
        vrh detect --model "$CP" --data "$D" --n "$N" --out "$OUT/det_cp" --overwrite
        vrh transfer --heads "$OUT/demo_c/detect" --heads-b "$OUT/det_cp" --model "$CP" --data "$D" --k "$K" \
            --out "$OUT/transfer_c_to_cp" --overwrite
        C_RUNS+=("$OUT/det_cp" "$OUT/transfer_c_to_cp")
        vrh text-heads --model "$CP" "${TEXT_OPTS[@]}" --cross-heads "$OUT/det_cp" --out "$OUT/text_cp" --overwrite
        vrh compare-heads --heads "$OUT/det_cp" --heads-b "$OUT/text_cp" --model "$CP" --data "$D" --k "$K" \
            --max-new-tokens 24 --out "$OUT/cmp_cp" --overwrite
        C_RUNS+=("$OUT/text_cp" "$OUT/cmp_cp")
    else
        echo "organism C': $CP does not resolve to a checkpoint folder; skipping the C -> C' transfer"
        rm -rf "$OUT/det_cp" "$OUT/transfer_c_to_cp" "$OUT/text_cp" "$OUT/cmp_cp"
    fi
    if [[ -f "$C_DIR/emergence.jsonl" ]]; then
        vrh organism emergence "$C_DIR" --out "$OUT/emergence_c" --overwrite
        C_RUNS+=("$OUT/emergence_c")
    fi
else
    echo "organism C: $C does not resolve to a checkpoint folder (no config.json); skipping C's part"
    # C's folders from an earlier run would otherwise be read as this run's figures
    rm -rf "$OUT/demo_c" "$OUT/compare_c" "$OUT/transfer_a_to_c" "$OUT/transfer_c_to_a" "$OUT/emergence_c" \
        "$OUT/det_cp" "$OUT/transfer_c_to_cp" "$OUT/det_c" "$OUT/text_c" "$OUT/cmp_c" "$OUT/text_cp" "$OUT/cmp_cp"
    C_RUNS=()
fi

vrh report "$OUT/demo" "$OUT/demo/detect" "$OUT/demo/sweep_grounding" "$OUT/demo/sweep_vqa" "$OUT/det_a" \
    "$OUT/det_b" "$OUT/transfer" "$OUT/stability" "$OUT/compare" "$OUT/sweep_uniform" "$OUT/text_a" ${C_RUNS[@]+"${C_RUNS[@]}"} \
    --k "$K" --out "$OUT/report"
python "$(dirname "$0")/organism_acceptance.py" "$OUT" --json "$OUT/acceptance.json"
echo "findings in $OUT; report: $OUT/report/report.html"
