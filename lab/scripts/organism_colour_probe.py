"""Where does an organism lose colour? A ridge probe for the colour (and shape) of the object under each
visual token, read from the tower's output, inside the projector (after linear_1, after its GELU), at the
LM's input (hidden_states[0], the projector's output) and after every LM layer.

    python lab/scripts/organism_colour_probe.py [CHECKPOINT]   (default src/vrh/organism/checkpoints/organism_a)

Trains on 120 region-caption images of seed 111, reports accuracy on 60 of seed 222 (chance ~ 1/6).
"""

import sys

import torch

from vrh.organism import world
from vrh_lab.organism.batches import train_batch
from vrh_lab.organism.pretrain_vision import dense_targets
from vrh_lab.organism.probe_heads import load
from vrh_lab.organism.processor import build_tokenizer


def collect(model, tok, spec, seed: int, n: int):
    """({stage: [n*V, D] features}, colour [n*V], shape [n*V]) with -100 where no object covers a patch."""
    samples = [world.caption_sample(seed, k) for k in range(n)]
    b = train_batch(samples, tok, spec)
    with torch.no_grad():
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, pixel_values=b.pixel_values,
                    output_hidden_states=True)
        tower = model.model.vision_tower(b.pixel_values, output_hidden_states=True).hidden_states[-1][:, 1:]
        proj = model.model.multi_modal_projector
        lin1 = proj.linear_1(tower)  # [n, V, T]
        stages = {"tower output": tower, "projector linear_1": lin1, "projector GELU": proj.act(lin1)}
    feats = {k: v.reshape(-1, v.shape[-1]) for k, v in stages.items()}  # [n*V, D]
    for layer, h in enumerate(out.hidden_states):
        where = "LM input (after the projector)" if layer == 0 else f"after LM layer {layer - 1}"
        feats[where] = h[b.visual].reshape(-1, h.shape[-1])  # [n*V, D]
    dense = [dense_targets(s["scene"], spec) for s in samples]
    colour = torch.tensor([c for d in dense for c in d["colour"]])  # [n*V]
    shape = torch.tensor([c for d in dense for c in d["shape"]])  # [n*V]
    return feats, colour, shape


def ridge_accuracy(a, y, b, yt, classes: int) -> float:
    k, kt = y >= 0, yt >= 0  # patches with an object
    X = torch.cat([a[k], torch.ones(int(k.sum()), 1)], 1)  # [N, D+1]
    Y = torch.nn.functional.one_hot(y[k], classes).float()  # [N, classes]
    W = torch.linalg.solve(X.T @ X + 1e-2 * torch.eye(X.shape[1]), X.T @ Y)  # ridge, [D+1, classes]
    Xt = torch.cat([b[kt], torch.ones(int(kt.sum()), 1)], 1)
    return float(((Xt @ W).argmax(1) == yt[kt]).float().mean())


def main(path: str = "src/vrh/organism/checkpoints/organism_a") -> None:
    torch.set_num_threads(1)
    model, spec, _ = load(path)
    tok = build_tokenizer()
    f_tr, c_tr, s_tr = collect(model, tok, spec, 111, 120)
    f_te, c_te, s_te = collect(model, tok, spec, 222, 60)
    for where in f_tr:
        colour = ridge_accuracy(f_tr[where], c_tr, f_te[where], c_te, len(world.COLOURS))
        shape = ridge_accuracy(f_tr[where], s_tr, f_te[where], s_te, len(world.SHAPES))
        print(f"visual tokens, {where}: colour probe {colour:.3f}, shape probe {shape:.3f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
