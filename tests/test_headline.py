"""The headline claim, guarded on the SHIPPED organism: the top-3 heads detected on a few dozen grounding
samples carry grounding (masking them costs >= 40 points on held-out samples) while 3 random heads drawn
outside them do not (<= 15 points). The demo measures 92.0 -> 16.5% vs 90.0% (n = 200); this is the same
pipeline (world data, detection split, detection, conditions, runner) at a size that runs in seconds, so a
change that silently breaks capture, scoring, masking or the judge fails here.
"""

from vrh.experiments import conditions as cond
from vrh.analyses.demo.settings import DEMO_WORLD_SEED
from vrh.experiments.detection import detect_heads, detection_split
from vrh.models.loading import load_model
from vrh.options import DetectOptions
from vrh.organism.world import write_split
from vrh.experiments.runner import run_conditions
from vrh.tasks import get_task

N_DETECT, N_EVAL, K = 48, 40, 3
GEN = dict(batch_size=48, max_new_tokens=24)  # the demo's answer length


def test_top3_heads_carry_grounding_and_random_heads_do_not(tmp_path, monkeypatch):
    import dataclasses

    from vrh.core import masking

    lm = load_model("organism")
    data = write_split(tmp_path, N_DETECT + N_EVAL, DEMO_WORLD_SEED, "grounding")
    detect, held_out, _ = detection_split(data, DetectOptions(n=N_DETECT, n_eval=N_EVAL))
    assert len(held_out) == N_EVAL and not {s.id for s in detect} & {s.id for s in held_out}

    found = detect_heads(lm, detect, **GEN)
    top = cond.top_k(found.head_scores.scores(), K, method=found.head_scores.scorer)
    rnd = cond.random_outside(lm.num_layers, lm.num_heads, K, 0, outside=top.heads)
    assert len(top.heads) == K and len(rnd.heads) == K
    assert not set(rnd.heads) & set(top.heads)

    masked: dict[tuple, int] = {}  # head set the runner really masked -> rows answered under it
    zero = masking.get_mask_mode("zero")  # the runner masks each row through its mode's own per-row application
    real_mask = zero.apply_rows

    def recording_mask(model, adapter, row_heads, *args, **kw):
        for heads in row_heads:
            key = tuple(sorted(tuple(h) for h in heads))
            masked[key] = masked.get(key, 0) + 1
        return real_mask(model, adapter, row_heads, *args, **kw)

    monkeypatch.setitem(masking._MODES, "zero", dataclasses.replace(zero, apply_rows=recording_mask))
    res = run_conditions(lm, get_task("grounding"), held_out, [cond.none(), top, rnd], **GEN)
    assert masked == {(): N_EVAL, top.heads: N_EVAL, rnd.heads: N_EVAL}

    base, top_acc, rnd_acc = (res.summary(c.label)["accuracy"] for c in (cond.none(), top, rnd))
    assert base - top_acc >= 0.40, (base, top_acc, top.heads)
    assert base - rnd_acc <= 0.15, (base, rnd_acc, rnd.heads)
