"""A quick, self-contained VRH check on a trained organism (the full experiment lives in vrh.commands).

VRH score of head (l, h) = mean over held-out grounding samples of the attention mass that the
teacher-forced answer tokens put on the visual tokens whose patch overlaps the GT box. Then held-out
accuracy with the top-k heads zeroed vs k random heads (outside the top-k) zeroed.

``python -m vrh.organism.probe_heads DIR [DIR_B] [--n 300] [--k 3]``: with DIR_B, also masks A's top-k in B.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import LlavaForConditionalGeneration

from vrh.core.heads import random_heads, top_k
from vrh.organism import world
from vrh.organism.batches import train_batch
from vrh.organism.evaluate import grounding_accuracy
from vrh.organism.processor import ImageSpec, build_tokenizer


def load(path: str | Path):
    meta = json.loads((Path(path) / "vrh_organism.json").read_text())
    model = LlavaForConditionalGeneration.from_pretrained(path, attn_implementation="eager").eval()
    return model, ImageSpec(meta["image_size"], meta["patch_size"], meta["bin_px"]), meta


def patch_rects(spec: ImageSpec) -> torch.Tensor:
    g, p = spec.grid, spec.patch_size
    rows, cols = torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")  # [g, g] each
    rects = torch.stack([cols * p, rows * p, (cols + 1) * p, (rows + 1) * p], -1)  # [g, g, 4]
    return rects.reshape(-1, 4).float()  # [g*g, 4], row-major like the tower's patch order


@torch.no_grad()
def vrh_scores(model, tok, spec: ImageSpec, samples, batch_size: int = 64) -> torch.Tensor:
    """[L, H] mean answer->GT-box attention mass."""
    rects = patch_rects(spec)
    total, count = None, 0
    for i in range(0, len(samples), batch_size):
        chunk = samples[i: i + batch_size]
        b = train_batch(chunk, tok, spec)
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, pixel_values=b.pixel_values,
                    output_attentions=True)
        att = torch.stack(out.attentions, 1)  # [B, L, H, S, S]
        for j, s in enumerate(chunk):
            box = torch.tensor(s["box"], dtype=torch.float)
            inside = ((rects[:, 0] < box[2]) & (rects[:, 2] > box[0]) &
                      (rects[:, 1] < box[3]) & (rects[:, 3] > box[1]))  # [V]
            vis_pos = b.visual[j].nonzero().squeeze(1)[inside]  # key positions on the referent
            ans_pos = (b.labels[j] != -100).nonzero().squeeze(1)[:-1]  # answer tokens, EOS excluded
            rows = att[j][:, :, ans_pos][..., vis_pos]  # [L, H, A, V_in]
            m = rows.sum(-1).mean(-1)  # [L, H]
            total = m if total is None else total + m
            count += 1
    return total / count


def probe(path_a: str, path_b: str | None = None, n: int = 300, ks=(1, 2, 3), seeds=(0, 1, 2),
          heldout_seed: int = 10_000) -> dict:
    tok = build_tokenizer()
    samples = [world.grounding_sample(heldout_seed, k) for k in range(n)]
    score_samples = [world.grounding_sample(heldout_seed + 1, k) for k in range(min(n, 200))]
    model, spec, _ = load(path_a)
    L, H = model.config.text_config.num_hidden_layers, model.config.text_config.num_attention_heads
    scores = vrh_scores(model, tok, spec, score_samples)
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
        sc_b = vrh_scores(mb, tok, sb, score_samples)
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
