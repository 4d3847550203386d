#!/usr/bin/env bash
# Every vrh command, once, on the shipped organism at small n, into OUT; then one digest line per file written
# (lab/scripts/run_folder_digests.py). Run it before and after a refactor into the SAME OUT path and diff the two
# digest files: a line that differs is a run folder that changed (timing and environment fields aside).
# Usage: bash lab/scripts/run_folder_digests.sh OUT DIGESTS   (OUT is replaced; about 5 min on 2 cores)
set -euo pipefail
OUT=${1:?usage: run_folder_digests.sh OUT DIGESTS}
DIGESTS=${2:?usage: run_folder_digests.sh OUT DIGESTS}
STUDY=${STUDY:-examples/organism_study.toml}
export OMP_NUM_THREADS=1 VRH_NO_PROGRESS=1 PYTHONHASHSEED=0
rm -rf "$OUT" && mkdir -p "$OUT"
R=$OUT/runs
G="--batch-size 16 --max-new-tokens 24"
vrh demo --out "$R/demo" --n-detect 24 --n-eval 24 --n-vqa 12 --batch-size 16
D=$R/demo/data/grounding.jsonl; V=$R/demo/data/vqa.jsonl
vrh detect    --model organism --data $D --n 24 --scorers out/sum/mean,rand1/sum/mean $G --out $R/det
vrh evaluate  --model organism --data $D --mask-heads $R/det --k 3 $G --out $R/ev
vrh evaluate  --model organism --data $D --mask-heads $R/det --k 3 --random --seed 0 $G --out $R/ev_rand
vrh sweep     --model organism --data $V --task vqa --heads $R/det --ks 0,3 --seeds 0,1 $G --out $R/sweep_vqa
vrh compare   --model organism --data $D --n 24 --ks 1,3 $G --out $R/compare
vrh detect    --model organism:organism_b --data $D --n 24 $G --out $R/det_b
vrh transfer  --heads $R/det --heads-b $R/det_b --model organism:organism_b --data $D --k 3 $G --out $R/transfer
vrh stability --heads $R/det --model organism --data $D --k 3 $G --out $R/stability
vrh dpo-pairs --model organism --heads $R/det --data $D --k 3 $G --out $R/dpo_pairs
vrh dpo-train --model organism --pairs $R/dpo_pairs --max-steps 2 --lr 1e-5 --out $R/dpo_train
vrh report    $R/det $R/det_b $R/ev $R/ev_rand $R/sweep_vqa $R/compare $R/transfer $R/stability $R/dpo_pairs \
              $R/dpo_train --out $R/report
python -c "from pathlib import Path; from vrh.study.datasets import write_world_refcoco; \
write_world_refcoco(Path('$OUT/snapshot'), 12, 7)"
vrh data convert refcoco "$OUT/snapshot" --split val --out "$OUT/converted"
vrh study run "$STUDY" --out "$OUT/study"
python "$(dirname "$0")/run_folder_digests.py" "$OUT" "$(cd "$(dirname "$0")/../.." && pwd)" > "$DIGESTS"
echo "$(wc -l < "$DIGESTS") files digested into $DIGESTS"
