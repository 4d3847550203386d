"""Which heads look at the referent from which answer position, on an organism checkpoint.

    python lab/scripts/organism_position_maps.py src/vrh/organism/checkpoints/organism_a [--n 64]

The detector's ``out/sum/mean`` map averages over every answer row. On the organism the answer is
``[ x1 , y1 , x2 , y2 ]``: the row that produces ``[`` (the last prompt token) and the one that produces x1
must *find* the referent from the expression, while later rows can read the box back from the
coordinates already written (a layer-0 head can match a written coordinate token to patch positions
without knowing the expression). This prints the top heads of the answer->GT-box attention mass for the
row producing ``[``, the row producing x1, and the rows producing y1 .. ``]``, on held-out probe samples
(seed 10001, as the emergence tracker's map), teacher-forced with eager attention; Eq. 1 on each row set
through vrh's own scoring functions.
"""

from __future__ import annotations

import argparse

import torch


def main() -> int:
    from transformers import LlavaForConditionalGeneration

    from vrh.organism import world
    from vrh.scoring.functions import omega_mean, per_sample_score
    from vrh_lab.organism.batches import train_batch
    from vrh_lab.organism.processor import ImageSpec, build_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", help="an exported organism folder")
    ap.add_argument("--n", type=int, default=64, help="probe samples")
    ap.add_argument("--top", type=int, default=5, help="heads printed per row set")
    a = ap.parse_args()
    model = LlavaForConditionalGeneration.from_pretrained(a.checkpoint, attn_implementation="eager").eval()
    spec = ImageSpec(image_size=model.config.vision_config.image_size,
                     patch_size=model.config.vision_config.patch_size)
    samples = [world.grounding_sample(10001, k) for k in range(a.n)]
    b = train_batch(samples, build_tokenizer(), spec)
    with torch.no_grad():
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, pixel_values=b.pixel_values,
                    output_attentions=True)
    att = torch.stack(out.attentions, 1)  # [B, L, H, S, S]
    L, H = att.shape[1:3]
    for name, pick in (("row producing '['", slice(0, 1)), ("row producing x1", slice(1, 2)),
                       ("rows producing y1 .. ']'", slice(2, 9))):
        per = []
        for i in range(len(samples)):
            rows = (b.labels[i] != -100).nonzero().flatten() - 1  # row t-1 produces the label at t
            per.append(per_sample_score(att[i], b.box_keys[i], rows[pick], "sum"))  # [L, H]: mass on the GT box
        sc = omega_mean(torch.stack(per)).flatten()  # [N, L, H] -> [L * H]
        top = sc.argsort(descending=True)[:a.top]
        print(f"{name:<26} " + ", ".join(f"{int(t) // H}:{int(t) % H} {float(sc[t]):.2f}" for t in top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
