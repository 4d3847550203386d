"""The training pressures on the organisms' attention: head dropout, the attribute probes, and the
differentiable attention terms of the loss (routing mass, answer-to-box mass, the box NLL), computed on
training batches; :func:`forward_loss` runs one forward and returns the loss with whichever terms a step
asks for. These are loss terms, not measurements: vrh's scorers measure the trained organisms."""

from __future__ import annotations

import torch

from vrh.organism import world
from vrh_lab.organism.batches import TrainBatch
from vrh_lab.organism.model import lm_o_projs


class HeadDropout:
    """Zero whole LM heads (their o_proj input slices) per sample while ``active``.

    ``protected``: a set of (layer, head) never dropped - the organism's current retrieval heads (those
    with the highest running answer->GT-box attention mass), so that dropout makes *everything else*
    redundant while retrieval stays where it is (see ``dropout_protect_top``)."""

    def __init__(self, model, p: float):
        cfg = model.config.text_config
        self.H, self.D = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
        self.p, self.active = p, False
        self.protected: set[tuple[int, int]] = set()
        self.handles = [o.register_forward_pre_hook(self._hook(layer)) for layer, o in enumerate(lm_o_projs(model))]

    def _hook(self, layer: int):
        def hook(_mod, args):
            if not self.active or self.p <= 0:
                return None
            x = args[0]  # [B, S, H*D]
            keep = torch.rand(x.shape[0], 1, self.H, 1) >= self.p  # [B, 1, H, 1]
            for l, h in self.protected:
                if l == layer:
                    keep[:, :, h] = True
            x = (x.view(*x.shape[:-1], self.H, self.D) * keep.to(x)).view(x.shape)
            return (x,) + args[1:]
        return hook


class AttrProbes(torch.nn.Module):
    """Linear colour and shape read-outs per probed layer (``attr_aux``); not part of the exported model."""

    def __init__(self, hidden: int, layers: tuple[int, ...]):
        super().__init__()
        self.layers = layers
        self.colour = torch.nn.ModuleList(torch.nn.Linear(hidden, len(world.COLOURS)) for _ in layers)
        self.shape = torch.nn.ModuleList(torch.nn.Linear(hidden, len(world.SHAPES)) for _ in layers)

    def loss(self, hidden_states, batch: TrainBatch) -> tuple[torch.Tensor, float]:
        """(mean cross-entropy over probed layers and attributes, colour accuracy at the last probed layer)."""
        ce = torch.nn.functional.cross_entropy
        yc, ys = batch.patch_colour.reshape(-1), batch.patch_shape.reshape(-1)  # [B_img*V]
        if not bool((yc != -100).any()):  # a text-only batch (or objectless patches only): nothing to probe
            return hidden_states[0].new_zeros(()), 0.0
        total = 0.0
        for i, layer in enumerate(self.layers):
            h = hidden_states[layer][batch.visual]  # [B*V, D]: every sample's V visual tokens, in order
            logits = self.colour[i](h)  # [B*V, colours]
            total = total + ce(logits, yc, ignore_index=-100) + ce(self.shape[i](h), ys, ignore_index=-100)
        keep = yc != -100  # the last layer's logits remain in `logits`
        acc = float((logits[keep].argmax(-1) == yc[keep]).float().mean()) if keep.any() else 0.0
        return total / (2 * len(self.layers)), acc


def route_mass(attentions, batch: TrainBatch) -> torch.Tensor:
    """[L, H] mean attention mass from text/answer queries onto visual keys."""
    vis = batch.visual[:, None, None, :].to(attentions[0].dtype)  # [B, 1, 1, S]
    q = batch.text_query[:, None, :].to(attentions[0].dtype)  # [B, 1, S]
    per_layer = []
    for a in attentions:  # a: [B, H, S, S]
        mass = (a * vis).sum(-1)  # [B, H, S]
        per_layer.append((mass * q).sum((0, 2)) / q.sum())  # [H]
    return torch.stack(per_layer)  # [L, H]


def answer_box_mass(attentions, batch: TrainBatch, first: int = 0) -> torch.Tensor | None:
    """[L, B', H] per sample with a box (grounding; captions): mean over the positions that predict answer
    tokens of the attention mass on the box's patches (B' = those samples); None if there are none.

    ``first`` > 0 keeps only the positions that predict the first ``first`` answer tokens: with the GT
    answer teacher-forced, later positions can find the box from the coordinates already written, so
    only the early ones measure retrieval from the expression (run v2b, docs/organism.md)."""
    q = batch.text_query & (batch.labels != -100) & batch.box_keys.any(dim=1, keepdim=True)  # [B, S]
    q = q.roll(-1, dims=1)  # the positions that *predict* answer tokens
    if first > 0:
        q = q & (q.long().cumsum(1) <= first)
    has = q.any(1)
    if not has.any():
        return None
    a = torch.stack(attentions)  # [L, B, H, S, S]
    mass = (a * batch.box_keys[None, :, None, None, :].to(a.dtype)).sum(-1)  # [L, B, H, S]
    per = (mass * q[None, :, None, :].to(a.dtype)).sum(-1) / q.sum(1).clamp(min=1)[None, :, None]  # [L, B, H]
    return per[:, has]


def box_nll(attentions, batch: TrainBatch, first: int = 0, per_sample: bool = False) -> torch.Tensor:
    """Warm start of retrieval: -log of the answer->GT-box attention mass of the *one* (layer, head) that
    has the most of it over the whole batch (the model's choice; no head is named).

    The max is taken over heads of the batch mean, not per sample: a per-sample max (run v2a) was
    satisfied by heads that each watched a different object (any sample's target is watched by *some*
    head), mass 0.997 with routing that ignored the expression."""
    per = answer_box_mass(attentions, batch, first)  # [L, B', H]
    if per is None:
        return attentions[0].new_zeros(())
    if per_sample:
        best = per.mean(1).flatten().argmax()  # the head, chosen as below
        L, B, H = per.shape
        chosen = per.permute(0, 2, 1).reshape(L * H, B)[best]  # [B']
        return -torch.log(chosen + 1e-4).mean()
    return -torch.log(per.mean(1).amax() + 1e-4)


@torch.no_grad()
def head_box_mass(attentions, batch: TrainBatch, first: int = 0) -> torch.Tensor | None:
    """[L, H] mean over grounding samples of the answer queries' attention mass on GT-box patches."""
    per = answer_box_mass(attentions, batch, first)
    return None if per is None else per.mean(1)


def forward_loss(model, batch: TrainBatch, want_attn: bool, want_box: bool = False, want_heads: bool = False,
                 first: int = 0, per_sample: bool = False, probes: AttrProbes | None = None):
    """The training forward. The LM runs eager attention only when a loss or statistic reads the attention
    weights; otherwise SDPA (the same function, faster on CPU; tested equal in
    loss and gradients), restored to the model's own setting afterwards (tracking and evaluation read the
    weights)."""
    need = want_attn or want_box or want_heads
    text_impl = model.config.text_config._attn_implementation
    vision_impl = model.config.vision_config._attn_implementation
    if not need and text_impl != "sdpa":
        model.set_attn_implementation({"text_config": "sdpa", "vision_config": vision_impl})
    try:
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    pixel_values=batch.pixel_values, labels=batch.labels,
                    output_attentions=need, output_hidden_states=probes is not None)
    finally:
        if model.config.text_config._attn_implementation != text_impl:
            model.set_attn_implementation({"text_config": text_impl, "vision_config": vision_impl})
    aux = probes.loss(out.hidden_states, batch) if probes is not None else None
    mass = route_mass(out.attentions, batch) if want_attn else None
    box = box_nll(out.attentions, batch, first, per_sample) if want_box else None
    heads = head_box_mass(out.attentions, batch, first) if want_heads else None
    return out.loss, mass, box, heads, aux
