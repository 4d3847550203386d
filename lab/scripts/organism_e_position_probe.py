"""Where organism E's frozen DINOv2 tower keeps the place: ridge probes from each layer's patch features.

A LLaVA grounds by reading, at the answer, the visual tokens of the named object; the answer's coordinates can
only come from what those tokens carry. The LM knows a token's place in the sequence through RoPE only relative
to its own position, so the tokens themselves must say where they are. Per layer of the tower (0: the patch
embedding + position code, 12: the last, before the final norm, which E feeds its projector):

* ``cell``: every patch token -> its own cell (row, col) in [0, 1];
* ``background``: the same on the tokens whose cell meets no object (the picture alone cannot tell them apart:
  any place they carry comes from the position code);
* ``object_centre``: the token of the cell holding each object's box centre -> that centre (y, x) (D's probe).

R^2 on held-out images, the ridge picked by 5-fold cross-validation (:func:`organism_d_digits.cv_ridge_r2`).

    python lab/scripts/organism_e_position_probe.py --n-fit 120 --n-test 40 --json lab/organism_runs/vE_pilot/position_probe.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from organism_d_digits import cv_ridge_r2  # noqa: E402


def token_targets(scene, grid: int) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, torch.Tensor]]]:
    """Per patch (row-major, ``grid`` x ``grid``): its cell centre (row, col) in [0, 1] [grid*grid, 2], whether it
    meets no object [grid*grid], and (cell index, box centre (y, x) in [0, 1]) for each object."""
    size = scene.size
    cell = size / grid
    i, j = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    pos = torch.stack([i.flatten(), j.flatten()], 1).double() / max(1, grid - 1)  # [V, 2]
    free = torch.ones(grid * grid, dtype=torch.bool)
    centres = []
    for o in scene.objects:
        x1, y1, x2, y2 = o.box
        for v in range(grid * grid):
            r, c = divmod(v, grid)
            if x1 < (c + 1) * cell and x2 > c * cell and y1 < (r + 1) * cell and y2 > r * cell:
                free[v] = False
        cy, cx = (y1 + y2) / 2, (x1 + x2) / 2
        centres.append((min(grid - 1, int(cy / cell)) * grid + min(grid - 1, int(cx / cell)),
                        torch.tensor([cy / size, cx / size], dtype=torch.double)))
    return pos, free, centres


@torch.no_grad()
def layer_features(tower, image_processor, scenes: list, bs: int = 16) -> torch.Tensor:
    """[N, L + 1, V, D] patch features of every hidden state (the CLS dropped)."""
    from vrh.organism import world

    out = []
    for k in range(0, len(scenes), bs):
        px = image_processor([world.render(s) for s in scenes[k:k + bs]], return_tensors="pt")["pixel_values"]
        hs = tower(pixel_values=px, output_hidden_states=True).hidden_states  # L + 1 x [b, 1 + V, D]
        out.append(torch.stack([h[:, 1:] for h in hs], 1))  # [b, L + 1, V, D]
    return torch.cat(out).double()


def _sets(feats: torch.Tensor, scenes: list, layer: int, grid: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    xs: dict[str, list] = {"cell": [], "background": [], "object_centre": []}
    ys: dict[str, list] = {"cell": [], "background": [], "object_centre": []}
    for n, scene in enumerate(scenes):
        pos, free, centres = token_targets(scene, grid)
        f = feats[n, layer]  # [V, D]
        xs["cell"].append(f)
        ys["cell"].append(pos)
        xs["background"].append(f[free])
        ys["background"].append(pos[free])
        for v, c in centres:
            xs["object_centre"].append(f[v:v + 1])
            ys["object_centre"].append(c[None])
    return {k: (torch.cat(xs[k]), torch.cat(ys[k])) for k in xs}


def probe(tower, image_processor, fit: list, test: list, grid: int) -> dict[str, Any]:
    fa, fb = layer_features(tower, image_processor, fit), layer_features(tower, image_processor, test)
    rows: dict[str, list[float]] = {"cell": [], "background": [], "object_centre": []}
    for layer in range(fa.shape[1]):
        a, b = _sets(fa, fit, layer, grid), _sets(fb, test, layer, grid)
        for k in rows:
            rows[k].append(round(cv_ridge_r2(a[k][0], a[k][1], b[k][0], b[k][1]), 4))
    return {"n_fit_images": len(fit), "n_test_images": len(test), "grid": grid, "r2_by_layer": rows,
            "layers": "0 = patch embedding + position code; last = the tower's last layer before its final norm"}


def main(argv: list[str] | None = None) -> int:
    from vrh.models import organism_e_base as parts
    from vrh.organism import world
    from vrh_lab.organism_e.model import image_processor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-fit", type=int, default=120)
    ap.add_argument("--n-test", type=int, default=40)
    ap.add_argument("--image-size", type=int, default=112)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    try:
        tower = parts.dinov2()
    except parts.PartsUnavailable as e:
        print(f"organism_e_position_probe: {e}")
        return 2
    scenes = [world.grounding_sample(20_000, i)["scene"] for i in range(a.n_fit + a.n_test)]
    rec = probe(tower, image_processor(a.image_size), scenes[:a.n_fit], scenes[a.n_fit:], a.image_size // 14)
    rec["image_size"] = a.image_size
    print(json.dumps(rec, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
