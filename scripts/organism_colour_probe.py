"""Where does an organism lose colour? A ridge probe for the colour of the object under each visual token,
read from the LM's input (hidden_states[0], after the projector) and after every LM layer.

    python scripts/organism_colour_probe.py [CHECKPOINT]   (default src/vrh/organism/checkpoints/organism_a)

Trains on 120 region-caption images of seed 111, reports accuracy on 60 of seed 222 (chance ~ 1/6).
"""

import sys

import torch

from vrh.organism import world
from vrh.organism.batches import train_batch
from vrh.organism.pretrain_vision import dense_targets
from vrh.organism.probe_heads import load
from vrh.organism.processor import build_tokenizer


def collect(model, tok, spec, seed: int, n: int):
    samples = [world.caption_sample(seed, k) for k in range(n)]
    b = train_batch(samples, tok, spec)
    with torch.no_grad():
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, pixel_values=b.pixel_values,
                    output_hidden_states=True)
    colour = torch.tensor([c for s in samples for c in dense_targets(s["scene"], spec)["colour"]])  # [n*V]
    return [h[b.visual].reshape(-1, h.shape[-1]) for h in out.hidden_states], colour  # per layer [n*V, D]


def main(path: str = "src/vrh/organism/checkpoints/organism_a") -> None:
    torch.set_num_threads(1)
    model, spec, _ = load(path)
    tok = build_tokenizer()
    h_tr, c_tr = collect(model, tok, spec, 111, 120)
    h_te, c_te = collect(model, tok, spec, 222, 60)
    k_tr, k_te = c_tr >= 0, c_te >= 0  # patches with an object
    for layer, (a, b) in enumerate(zip(h_tr, h_te)):
        X = torch.cat([a[k_tr], torch.ones(int(k_tr.sum()), 1)], 1)  # [N, D+1]
        Y = torch.nn.functional.one_hot(c_tr[k_tr], len(world.COLOURS)).float()  # [N, 6]
        W = torch.linalg.solve(X.T @ X + 1e-2 * torch.eye(X.shape[1]), X.T @ Y)  # ridge, [D+1, 6]
        Xt = torch.cat([b[k_te], torch.ones(int(k_te.sum()), 1)], 1)
        acc = float(((Xt @ W).argmax(1) == c_te[k_te]).float().mean())
        where = "LM input (after the projector)" if layer == 0 else f"after LM layer {layer - 1}"
        print(f"colour probe, visual tokens, {where}: {acc:.3f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
