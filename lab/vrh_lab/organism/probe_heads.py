"""A quick, self-contained VRH check on a trained organism (the full experiment lives in vrh.commands).

VRH score of head (l, h) = mean over held-out grounding samples of the attention mass that the rows
producing the teacher-forced answer tokens (``Q_out``) put on the visual tokens whose patch overlaps the GT
box: the emergence tracker's map, :func:`vrh_lab.organism.emergence.score_map`, i.e. vrh's ``out/sum/mean``
scorer. Then held-out accuracy with the top-k heads zeroed vs k random heads (outside the top-k) zeroed.

``python -m vrh_lab.organism.probe_heads DIR [DIR_B] [--n 300] [--k 3]``: with DIR_B, also masks A's top-k in B.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import LlavaForConditionalGeneration

from vrh.core.heads import random_heads, top_k
from vrh.organism import world
from vrh_lab.organism.emergence import score_map
from vrh_lab.organism.evaluate import grounding_accuracy
from vrh_lab.organism.processor import ImageSpec, build_tokenizer


def load(path: str | Path):
    meta = json.loads((Path(path) / "vrh_organism.json").read_text())
    model = LlavaForConditionalGeneration.from_pretrained(path, attn_implementation="eager").eval()
    return model, ImageSpec(meta["image_size"], meta["patch_size"], meta["bin_px"]), meta


def probe(path_a: str, path_b: str | None = None, n: int = 300, ks=(1, 2, 3), seeds=(0, 1, 2),
          heldout_seed: int = 10_000) -> dict:
    tok = build_tokenizer()
    samples = [world.grounding_sample(heldout_seed, k) for k in range(n)]
    score_samples = [world.grounding_sample(heldout_seed + 1, k) for k in range(min(n, 200))]
    model, spec, _ = load(path_a)
    L, H = model.config.text_config.num_hidden_layers, model.config.text_config.num_attention_heads
    scores = score_map(model, tok, spec, score_samples)
    res = {"scores": scores.tolist(), "base": grounding_accuracy(model, tok, samples, spec)}
    for k in ks:
        top = top_k(scores, k)
        res[f"top{k}"] = {"heads": top, **grounding_accuracy(model, tok, samples, spec, top)}
        rnd = []
        for sd in seeds:
            heads = random_heads(L, H, k, sd, exclude=top)
            rnd.append({"heads": heads, **grounding_accuracy(model, tok, samples, spec, heads)})
        res[f"random{k}"] = rnd
    if path_b:
        mb, sb, _ = load(path_b)
        sc_b = score_map(mb, tok, sb, score_samples)
        res["b"] = {"scores": sc_b.tolist(), "base": grounding_accuracy(mb, tok, samples, sb)}
        for k in ks:
            res["b"][f"own_top{k}"] = {"heads": top_k(sc_b, k),
                                      **grounding_accuracy(mb, tok, samples, sb, top_k(sc_b, k))}
            res["b"][f"a_top{k}"] = grounding_accuracy(mb, tok, samples, sb, top_k(scores, k))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    res = probe(args.a, args.b, n=args.n, ks=args.k)
    text = json.dumps(res, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    short = {k: v for k, v in res.items() if k not in ("scores", "b")}
    print(json.dumps(short))
    if "b" in res:
        print(json.dumps({k: v for k, v in res["b"].items() if k != "scores"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
