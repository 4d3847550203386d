"""The published head atlas drawn (``atlas.png``) and written (``atlas.md``) from its JSON only
(:func:`vrh.experiments.head_atlas.build_atlas`).

The figure: one matrix per language backbone, rows and columns its lists (the text list first, then each
VLM's five benchmarks), each cell the number of heads two lists share, coloured by how far that is beyond
chance (-log10 of the hypergeometric p, capped at 20); the diagonal is each list's length, grey.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.patches import Rectangle

from vrh.report.style import TITLE_SIZE, new_figure, to_png

P_CAP = 20.0


def _short(name: str) -> str:
    kind, _, body = name.partition(":")
    return f"QRHead {body}" if kind == "qrhead" else body.replace("/", " ")


def figure(atlas: Mapping[str, Any]) -> bytes:
    groups = atlas["groups"]
    fig = new_figure(7.0 * len(groups), 7.2)
    for g_i, g in enumerate(groups):
        ax = fig.add_subplot(1, len(groups), g_i + 1)
        size = len(g["lists"])
        strength = np.full((size, size), np.nan)  # (lists, lists): -log10 p off the diagonal
        for i in range(size):
            for j in range(size):
                if i != j:
                    strength[i, j] = min(P_CAP, -np.log10(max(g["p_value"][i][j], 10 ** -P_CAP)))
        im = ax.imshow(strength, cmap="Reds", vmin=0, vmax=P_CAP, interpolation="nearest")
        for i in range(size):
            ax.add_patch(Rectangle((i - 0.5, i - 0.5), 1, 1, color="#d9d9d9"))
            for j in range(size):
                dark = i != j and strength[i, j] > 0.6 * P_CAP
                ax.text(j, i, str(g["shared"][i][j]), ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
        labels = [_short(n) for n in g["lists"]]
        ax.set_xticks(range(size), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(size), labels, fontsize=7)
        ax.set_title(f"{g['backbone']} backbone ({g['num_layers']} x {g['num_heads']} = {g['n_heads']} heads): heads "
                     "shared", fontsize=TITLE_SIZE)
        fig.colorbar(im, ax=ax, shrink=0.7, label=f"-log10 p (hypergeometric, capped at {P_CAP:g})")
    return to_png(fig)


def _heads(hs) -> str:
    return " ".join(f"{l}:{h}" for l, h in hs)


def markdown(atlas: Mapping[str, Any]) -> str:
    lines = ["# The published head atlas", "",
             "Whole-list intersections of published head lists on one language backbone: the paper's top-20 VRHs "
             "(App. D) and QRHead's top-16 query-focused text retrieval heads (found on NQ, text only). Chance: two "
             "uniform random sets of the same sizes on the grid (hypergeometric; p = P(shared >= observed)); layer "
             "chance: each set's heads random within their own layers (the stricter null).", "",
             "Caveats: QRHead scores a head from the *query* tokens' attention to the gold text, the paper a VRH "
             "from the *answer* tokens' attention to the target's image tokens; a QRHead list is a top-16 set, not a "
             "ranking; the VLMs' LMs were trained further (multimodal training) from checkpoints of the family whose "
             "released model QRHead scored, so a shared (layer, head) is the same position in a related network.", "",
             "## Text retrieval heads vs the paper's VRHs", "",
             "| VRH list | text list | shared | chance | p | layer chance | layer p | shared heads |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in (p for p in atlas["pairs"] if p["relation"] == "text vs VRH"):
        flip = p["a"].startswith("qrhead:")
        vrh, text = (p["b"], p["a"]) if flip else (p["a"], p["b"])
        nv, nt = (p["size_b"], p["size_a"]) if flip else (p["size_a"], p["size_b"])
        lines.append(f"| {vrh} | {text} | {p['intersection']} (of {nv} and {nt}) | {p['chance']:.2f} | "
                     f"{p['p_value']:.2g} | {p['layer_chance']:.2f} | {p['layer_p_value']:.2g} | {_heads(p['shared'])} |")
    lines += ["", "## Summary per relation", "",
              "| backbone | relation | pairs | shared: min / median / max | chance | largest p | largest layer chance "
              "| largest layer p |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in atlas["summary"]:
        lines.append(f"| {s['backbone']} | {s['relation']} | {s['pairs']} | {s['min']} / {s['median']:g} / {s['max']} | "
                     f"{', '.join(f'{c:.2f}' for c in s['chance'])} | {s['max_p']:.2g} | {s['layer_chance_max']:.2f} | "
                     f"{s['max_layer_p']:.2g} |")
    for t in atlas.get("text_only", []):
        lines += ["", f"For scale, one method's own lists of one model on two datasets: {t['a']} and {t['b']} share "
                  f"{t['intersection']} of {t['size_a']} (chance {t['chance']:.2f}, p {t['p_value']:.2g}; layer chance "
                  f"{t['layer_chance']:.2f}, p {t['layer_p_value']:.2g}): {_heads(t['shared'])}."]
    for g in atlas["groups"]:
        names = [_short(n) for n in g["lists"]]
        lines += ["", f"## {g['backbone']} backbone: heads shared ({g['num_layers']} x {g['num_heads']} grid; diagonal: "
                  "list length)", "", "| | " + " | ".join(names) + " |", "| --- " * (len(names) + 1) + "|"]
        for name, row in zip(names, g["shared"]):
            lines.append(f"| {name} | " + " | ".join(map(str, row)) + " |")
    if atlas["left_out"]:
        lines += ["", "Left out: " + "; ".join(f"{x['name']} ({x['reason']})" for x in atlas["left_out"]) + "; and "
                  "the published score maps (retrieval-heads:, ocr-heads:), whose models no paper list sits on."]
    return "\n".join(lines) + "\n"
