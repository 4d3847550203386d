"""What organism D reads out of an image, digit by digit: the answer's coordinates teacher-forced.

Greedy answers say only whether a whole box is right. Here each held-out sample's true answer
(``{"box_2d": [ymin, xmin, ymax, xmax]}``, one Gemma token per digit) is fed to the model and every digit is
predicted from the true tokens before it: the accuracy of each coordinate's leading digit (where the object is,
to 100 of 1000) and of its whole number, beside the best constant guess's (the most frequent first digit in
the same samples). A model that reads the object's size but not its place gets ymin/xmin near the constant's
and ymax/xmax far above it (the second corner follows from the first and the size).

``--probe N``: whether the place is in the model but not read out. Ridge probes from the residual stream at the
position that predicts ymin's first digit (every layer's output) to the box's centre (y, x in [0, 1]), fitted on
N samples of another seed and scored (R^2) on the ``--n`` evaluated ones, the ridge chosen by 5-fold
cross-validation on the fit set; beside them two references at the LM's input: the visual token of the cell
holding the box's centre (a positive control: where the tower and projector keep the place, this probe finds
it) and the mean of the 49 visual tokens (every object's place, not which one the expression names).

    python lab/scripts/organism_d_digits.py --model organism:organism_d --n 200 --json runs/findings_d/digits.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch

COORDS = ("ymin", "xmin", "ymax", "xmax")


def number_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the four coordinates in an answer like ``{"box_2d": [741, 393, 946, 598]}``."""
    start = text.index("[")
    spans, i = [], start
    while len(spans) < 4:
        while not text[i].isdigit():
            i += 1
        j = i
        while j < len(text) and text[j].isdigit():
            j += 1
        spans.append((i, j))
        i = j
    return spans


@torch.no_grad()
def digit_accuracy(model, proc, samples: list[dict[str, Any]], bs: int = 16) -> dict[str, Any]:
    from vrh_lab.organism_d import data

    tok = proc.tokenizer
    lead = {c: [] for c in COORDS}
    whole = {c: [] for c in COORDS}
    truth_lead = {c: [] for c in COORDS}
    for a in range(0, len(samples), bs):
        chunk = samples[a:a + bs]
        batch = data.train_batch(proc, chunk)
        out = model.model(input_ids=batch["input_ids"], pixel_values=batch["pixel_values"],
                          attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"])
        pred = model.lm_head(out.last_hidden_state[:, :-1]).argmax(-1)  # [B, T-1]: position t predicts t+1
        for r, s in enumerate(chunk):
            answer = data.answer_of(s)
            enc = tok(answer, add_special_tokens=False, return_offsets_mapping=True)
            first = int((batch["labels"][r] != -100).nonzero()[0])  # the answer's first token in the row
            for c, (i, j) in zip(COORDS, number_spans(answer)):
                idx = [k for k, (x, y) in enumerate(enc["offset_mapping"]) if x < j and y > i]
                hits = [int(pred[r, first + k - 1] == batch["input_ids"][r, first + k]) for k in idx]
                lead[c].append(hits[0])
                whole[c].append(int(all(hits)))
                truth_lead[c].append(answer[i])  # the first digit token, what ``lead`` scores
    n = len(samples)
    return {"n": n, "coords": {c: {"leading_digit": sum(lead[c]) / n, "whole_number": sum(whole[c]) / n,
                                   "constant_leading_digit": Counter(truth_lead[c]).most_common(1)[0][1] / n}
                               for c in COORDS}}


@torch.no_grad()
def probe_features(model, proc, samples: list[dict[str, Any]], bs: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, L + 1, D] residual stream (embeddings, then each layer's output) at the position predicting the
    first digit, [N, 2, D] the visual token of the box centre's cell and the mean visual token as the LM receives
    them, and [N, 2] the box centre (y, x) in [0, 1]."""
    from vrh_lab.organism_d import data

    feats, vis, target = [], [], []
    image_id = model.config.image_token_index
    for a in range(0, len(samples), bs):
        chunk = samples[a:a + bs]
        batch = data.train_batch(proc, chunk)
        out = model.model(input_ids=batch["input_ids"], pixel_values=batch["pixel_values"],
                          attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"],
                          output_hidden_states=True)
        hs = torch.stack(out.hidden_states, 1)  # [B, L + 1, T, D]
        tok = proc.tokenizer
        for r, s in enumerate(chunk):
            answer = data.answer_of(s)
            enc = tok(answer, add_special_tokens=False, return_offsets_mapping=True)
            i, _ = number_spans(answer)[0]
            k = next(k for k, (x, y) in enumerate(enc["offset_mapping"]) if x <= i < y)
            first = int((batch["labels"][r] != -100).nonzero()[0])
            feats.append(hs[r, :, first + k - 1])  # [L + 1, D]: the position whose output is ymin's first digit
            size = s["scene"].size
            x1, y1, x2, y2 = s["box"]
            soft = hs[r, 0][batch["input_ids"][r] == image_id]  # [V, D], V = G * G in row-major cell order
            g = int(round(len(soft) ** 0.5))
            cell = min(g - 1, int((y1 + y2) / 2 / size * g)) * g + min(g - 1, int((x1 + x2) / 2 / size * g))
            vis.append(torch.stack([soft[cell], soft.mean(0)]))  # [2, D]
            target.append(torch.tensor([(y1 + y2) / 2 / size, (x1 + x2) / 2 / size]))
    return torch.stack(feats).double(), torch.stack(vis).double(), torch.stack(target).double()


def ridge_r2(x_fit: torch.Tensor, y_fit: torch.Tensor, x: torch.Tensor, y: torch.Tensor, lam: float = 1.0) -> float:
    """R^2 (averaged over targets) on (x, y) of a ridge regression fitted on (x_fit, y_fit), features
    standardized on the fit set."""
    mu, sd = x_fit.mean(0), x_fit.std(0) + 1e-6
    a, b = (x_fit - mu) / sd, (x - mu) / sd
    a = torch.cat([a, torch.ones(len(a), 1, dtype=a.dtype)], 1)
    b = torch.cat([b, torch.ones(len(b), 1, dtype=b.dtype)], 1)
    w = torch.linalg.solve(a.T @ a + lam * torch.eye(a.shape[1], dtype=a.dtype), a.T @ y_fit)
    resid = ((b @ w - y) ** 2).sum(0)
    total = ((y - y.mean(0)) ** 2).sum(0)
    return float((1 - resid / total).mean())


LAMBDAS = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5)


def cv_ridge_r2(x_fit: torch.Tensor, y_fit: torch.Tensor, x: torch.Tensor, y: torch.Tensor, folds: int = 5) -> float:
    """:func:`ridge_r2` with the ridge picked by ``folds``-fold cross-validation on the fit set."""
    idx = torch.arange(len(x_fit))

    def cv(lam: float) -> float:
        scores = []
        for f in range(folds):
            held = idx % folds == f
            scores.append(ridge_r2(x_fit[~held], y_fit[~held], x_fit[held], y_fit[held], lam))
        return sum(scores) / folds

    return ridge_r2(x_fit, y_fit, x, y, max(LAMBDAS, key=cv))


def probe(model, proc, fit: list[dict[str, Any]], test: list[dict[str, Any]]) -> dict[str, Any]:
    fa, va, ya = probe_features(model, proc, fit)
    fb, vb, yb = probe_features(model, proc, test)
    return {"n_fit": len(fit), "n_test": len(test), "target": "box centre (y, x) in [0, 1]",
            "r2_by_layer": [cv_ridge_r2(fa[:, j], ya, fb[:, j], yb) for j in range(fa.shape[1])],
            "r2_centre_cell_token": cv_ridge_r2(va[:, 0], ya, vb[:, 0], yb),
            "r2_visual_tokens_mean": cv_ridge_r2(va[:, 1], ya, vb[:, 1], yb)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="organism:organism_d")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=10_000, help="the world's seed (10000: D's held-out stream)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--probe", type=int, default=0, help="fit the place probes on this many other samples (0: none)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    import vrh
    from vrh.models import gemma_base
    from vrh.organism import world
    from vrh_lab.organism_d import data

    lm = vrh.load_model(a.model)
    lm.model.eval()
    proc = data.processor(gemma_base.base_folder())
    res = digit_accuracy(lm.model, proc, [world.grounding_sample(a.seed, i) for i in range(a.n)])
    res.update(model=a.model, seed=a.seed)
    if a.probe:
        fit = [world.grounding_sample(a.seed + 1, i) for i in range(a.probe)]
        res["probe"] = probe(lm.model, proc, fit, [world.grounding_sample(a.seed, i) for i in range(a.n)])
    print(f"{a.model}: teacher-forced digits on {a.n} samples of seed {a.seed} (leading digit / whole number / "
          "best constant leading digit)")
    for c, v in res["coords"].items():
        print(f"  {c:<5} {v['leading_digit']:.3f} / {v['whole_number']:.3f} / {v['constant_leading_digit']:.3f}")
    if a.probe:
        pr = res["probe"]
        print(f"  place probe R^2 (fit {pr['n_fit']}, test {pr['n_test']}): the centre cell's visual token "
              f"{pr['r2_centre_cell_token']:.3f}, mean visual token {pr['r2_visual_tokens_mean']:.3f}; residual stream before ymin's first digit, layer 0-"
              f"{len(pr['r2_by_layer']) - 1}: " + " ".join(f"{v:.2f}" for v in pr["r2_by_layer"]))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
