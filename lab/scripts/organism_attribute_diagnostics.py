"""The v4 attribute diagnostics of docs/organism.md, on a training run folder (its ckpt.pt + config.json).

    python lab/scripts/organism_attribute_diagnostics.py RUN_DIR breakdown   # attribute expressions: accuracy by
                                                                        # words used, what the wrong answers chose;
                                                                        # VQA accuracy by question
    python lab/scripts/organism_attribute_diagnostics.py RUN_DIR caption     # caption colour word (teacher-forced) and
                                                                        # colour probes at the answer / on the box
    python lab/scripts/organism_attribute_diagnostics.py RUN_DIR query       # expression colour word at the positions
                                                                        # predicting "[" and x1, per layer input
    python lab/scripts/organism_attribute_diagnostics.py RUN_DIR bilinear [--layer 3] [--iters 300]
                                                                        # can a fresh rank-16 attention match the
                                                                        # GT box from frozen layer inputs?

``breakdown`` also takes an exported checkpoint folder (e.g. src/vrh/organism/checkpoints/organism_c).
Run from the repository root. Probes are multinomial logistic regressions (L-BFGS) on standardised
features, trained on one seed's samples and scored on the held-out seed 10000.
"""

import argparse
import collections
import json
import os

import torch

from vrh.data import boxes as grounding
from vrh.organism import world
from vrh_lab.organism.batches import train_batch
from vrh_lab.organism.evaluate import GROUNDING, generate_answers
from vrh_lab.organism.train import Organisms, TrainConfig
from vrh.tasks.vqa import judge_answer

COLOUR = {c: i for i, c in enumerate(world.COLOURS)}


def load_exported(folder: str):
    """An exported organism (model.safetensors + vrh_organism.json) with what ``breakdown`` reads of a run."""
    from types import SimpleNamespace

    from transformers import LlavaForConditionalGeneration

    from vrh_lab.organism.processor import ImageSpec, build_tokenizer

    model = LlavaForConditionalGeneration.from_pretrained(folder).eval()
    vc = model.config.vision_config
    spec = ImageSpec(image_size=vc.image_size, patch_size=vc.patch_size)
    return SimpleNamespace(tok=build_tokenizer(), spec_a=spec), model


def load(run: str):
    """The run's organism A with its checkpoint's weights (stage inputs of the config are not needed)."""
    if not os.path.exists(f"{run}/ckpt.pt") and os.path.exists(f"{run}/vrh_organism.json"):
        return load_exported(run)
    d = json.load(open(f"{run}/config.json"))
    d.update(weights_from="", init_from="", vision_init_a="", vision_init_b="", lm_init="",
             projector_whiten=False, attr_aux=0.0)
    org = Organisms(TrainConfig.from_dict(d))
    st = torch.load(f"{run}/ckpt.pt", weights_only=False)
    org.a.load_state_dict(st["a"])
    print("step", st["step"])
    return org, org.a.eval()


def probe(x, y, xt, yt, classes: int) -> float:
    mu, sd = x.mean(0), x.std(0) + 1e-5
    x, xt = (x - mu) / sd, (xt - mu) / sd
    W = torch.zeros(x.shape[1], classes, requires_grad=True)
    b = torch.zeros(classes, requires_grad=True)
    opt = torch.optim.LBFGS([W, b], max_iter=200)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(x @ W + b, y) + 1e-3 * (W ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return float(((xt @ W + b).argmax(-1) == yt).float().mean())


def forward(org, model, samples):
    b = train_batch(samples, org.tok, org.spec_a)
    with torch.no_grad():
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, pixel_values=b.pixel_values,
                    output_hidden_states=True)
    first = (b.labels != -100).long().argmax(1)  # [B] position of the first answer token
    return b, out, first


def breakdown(org, model) -> None:
    samples = [s for s in (world.grounding_sample(10_000, i) for i in range(400)) if s["kind"] == "attribute"]
    acc, chose = collections.defaultdict(list), collections.Counter()
    for s, text in zip(samples, generate_answers(model, org.tok, samples, org.spec_a)):
        words = s["expression"].split()
        key = "+".join(k for k, vocab in (("size", world.SIZES), ("colour", world.COLOURS), ("shape", world.SHAPES))
                       if any(w in vocab for w in words))
        parsed = grounding.parse_box(text)
        box = None if parsed is None else parsed[1]
        ok = grounding.judge(box, s["box"], GROUNDING.tau)[0] == grounding.CORRECT  # as vrh evaluate judges it
        acc[key].append(ok)
        if box is not None and not ok:
            target = s["scene"].objects[s["target"]]
            best = max(s["scene"].objects, key=lambda o: grounding.iou(box, o.box))
            chose[(key, "same colour" if best.colour == target.colour else "other colour",
                   "same shape" if best.shape == target.shape else "other shape")] += 1
    for k, v in sorted(acc.items()):
        print(f"attribute expressions using {k}: n={len(v)} accuracy {sum(v) / len(v):.2f}")
    for k, v in sorted(chose.items()):
        print("wrong answers:", k, v)
    # the same matching in VQA: "what shape is the red object ?" needs the colour matched, as "the red
    # object" does in grounding; the answer is a word instead of a box
    vqa = [world.vqa_sample(10_000, i) for i in range(300)]
    by_q = collections.defaultdict(list)
    for s, text in zip(vqa, generate_answers(model, org.tok, vqa, org.spec_a, max_new_tokens=3)):
        by_q[" ".join(s["question"].split()[:2])].append(judge_answer(text, s["answer"], "exact") == "correct")
    for k, v in sorted(by_q.items()):
        print(f"VQA '{k} ...': n={len(v)} accuracy {sum(v) / len(v):.3f}")


def caption(org, model) -> None:
    def collect(seed, n):
        feats, ys, correct = collections.defaultdict(list), [], 0
        samples = [world.caption_sample(seed, i) for i in range(n)]
        for j in range(0, n, 50):
            part = samples[j:j + 50]
            b, out, first = forward(org, model, part)
            rows = torch.arange(len(part))
            for layer, h in enumerate(out.hidden_states):  # input of layer `layer` (4 = final)
                feats[("answer position predicting the colour word", layer)].append(h[rows, first])
                feats[("mean over the captioned box's tokens", layer)].append(
                    torch.stack([h[i][b.box_keys[i]].mean(0) for i in range(len(part))]))
            correct += int((out.logits[rows, first].argmax(-1) == b.input_ids[rows, first + 1]).sum())
            ys += [COLOUR[s["answer"].split()[1]] for s in part]
        return {k: torch.cat(v) for k, v in feats.items()}, torch.tensor(ys), correct / n

    tr, ytr, _ = collect(50_000, 600)
    te, yte, acc = collect(10_000, 300)
    print(f"teacher-forced caption colour-word accuracy {acc:.3f} (chance 0.167)")
    for k in tr:
        print(f"colour probe, {k[0]}, input of layer {k[1]}: {probe(tr[k], ytr, te[k], yte, 6):.3f}")


def query(org, model) -> None:
    def collect(seed, n):
        samples = [s for s in (world.grounding_sample(seed, i) for i in range(n))
                   if s["kind"] == "attribute" and any(w in COLOUR for w in s["expression"].split())]
        feats, ys = collections.defaultdict(list), []
        for j in range(0, len(samples), 50):
            part = samples[j:j + 50]
            b, out, first = forward(org, model, part)
            rows = torch.arange(len(part))
            for layer, h in enumerate(out.hidden_states):
                for off, name in ((-1, "predicting '['"), (0, "predicting x1")):
                    feats[(name, layer)].append(h[rows, first + off])
            ys += [COLOUR[[w for w in s["expression"].split() if w in COLOUR][0]] for s in part]
        return {k: torch.cat(v) for k, v in feats.items()}, torch.tensor(ys)

    tr, ytr = collect(60_000, 1500)
    te, yte = collect(10_000, 500)
    for k in tr:
        print(f"expression colour word, position {k[0]}, input of layer {k[1]}: {probe(tr[k], ytr, te[k], yte, 6):.3f}")


def bilinear(org, model, layer: int, iters: int) -> None:
    norm = model.model.language_model.layers[layer].input_layernorm

    def collect(seed, n):
        samples = [s for s in (world.grounding_sample(seed, i) for i in range(n)) if s["kind"] == "attribute"]
        Q, K, B = [], [], []
        for j in range(0, len(samples), 50):
            part = samples[j:j + 50]
            b, out, first = forward(org, model, part)
            with torch.no_grad():
                h = norm(out.hidden_states[layer])  # [B, S, D], what layer `layer`'s attention reads
            Q.append(h[torch.arange(len(part)), first - 1])  # the position predicting "["
            K.append(h[b.visual].reshape(len(part), -1, h.shape[-1]))  # [B, V, D]
            B.append(b.box_keys[b.visual].reshape(len(part), -1))  # [B, V]
        return torch.cat(Q), torch.cat(K), torch.cat(B).float()

    Qtr, Ktr, Btr = collect(70_000, 3000)
    Qte, Kte, Bte = collect(10_000, 600)
    torch.manual_seed(0)
    D = Qtr.shape[1]
    Wq = torch.nn.Parameter(torch.randn(D, 16) * 0.1)
    Wk = torch.nn.Parameter(torch.randn(D, 16) * 0.1)
    opt = torch.optim.Adam([Wq, Wk], lr=3e-3)

    def stats(Q, K, Bx):
        logits = torch.einsum("bd,de,bvf,fe->bv", Q, Wq, K, Wk) / 4  # [B, V]
        mass = (logits.softmax(-1) * Bx).sum(-1)
        hit = Bx.gather(1, logits.argmax(-1, keepdim=True)).squeeze(1)
        return mass, hit

    print(f"{len(Qtr)} training / {len(Qte)} held-out attribute samples, layer {layer}")
    for it in range(iters + 1):
        mass, _ = stats(Qtr, Ktr, Btr)
        loss = -torch.log(mass + 1e-4).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if it % 100 == 0:
            with torch.no_grad():
                mt, ht = stats(Qte, Kte, Bte)
            print(f"iter {it}: train loss {float(loss):.3f}, held-out box mass {float(mt.mean()):.3f}, "
                  f"argmax in box {float(ht.mean()):.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("what", choices=["breakdown", "caption", "query", "bilinear"])
    ap.add_argument("--layer", type=int, default=3)
    ap.add_argument("--iters", type=int, default=300)
    a = ap.parse_args()
    torch.set_num_threads(1)
    org, model = load(a.run)
    if a.what == "bilinear":
        bilinear(org, model, a.layer, a.iters)
    else:
        {"breakdown": breakdown, "caption": caption, "query": query}[a.what](org, model)


if __name__ == "__main__":
    main()
