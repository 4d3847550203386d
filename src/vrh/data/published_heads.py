"""Other methods' published head lists as named head sets (``qrhead:MODEL/DATA``), beside the paper's own
(``paper:MODEL/BENCHMARK``, :mod:`vrh.data.paper_heads`): one resolver for every named set.

Why ship them: a head list is a published fact, and the question "are the visual retrieval heads the language
model's text retrieval heads?" is answered first by intersecting lists that already exist (``vrh heads atlas``).
QRHead (princeton-pli/QRHead, query-focused retrieval heads) publishes the top-16 heads of four language models,
found on text alone, as one string in a YAML config (``attn_head_set: "L-H,L-H,..."``). The strings are copied
here verbatim (``text``), with the file they come from (repository, commit, path); the real-file tests check
that they parse to the heads of the files in ``../shared/real/heads/qrhead/`` (skipping without that folder).

Reading: ``L-H`` (Gemma's file: ``L_H``), 0-based layer and query head as Hugging Face numbers decoder layers
and heads -- the only reading under which the paper's lists and QRHead's agree beyond chance (8-11 of 20).
The order is the file's. QRHead's detection script sorts heads by their QR score before the top 16 are taken,
but the configs carry no scores, so a list here is a top-16 *set*: compared as a whole (``ranked=False``),
never at a top-k.

Each list carries the grid (layers x query heads) of its model's language model, read from the sources named
in ``grid_source``; a list is refused on a model of another grid, and a list whose heads do not fit its own
model's grid is refused everywhere (QRHead's Gemma-3-4B-it "mid" file names heads up to 31 of a model with 8
query heads per layer: it cannot be that model's heads as numbered here).

Whole score maps (:mod:`vrh.data.published_score_maps`, numbers generated from the authors' files at the
commits named, with each file's git blob id and size): Retrieval Heads' per-head copy-paste scores
(``retrieval-heads:MODEL``, nightdessert/Retrieval_Head ``head_score/MODEL.json``: ``{"L-H": [score per
detection]}``, ranked by the mean as its README ranks them) and OCR Heads' (``ocr-heads:MODEL/image`` and
``/text``, baekingeol/OCR_Head ``retrieval_score/...``: ``{"lL_hH": [score per sample]}``, scored as its
``step3_extracted_heads.py`` scores them: the mean where more than 10% of a head's entries are 0, else 0; its
OCR heads are those scoring at least 0.1). A map ranks every head, so top-k and rank correlations apply; as
``--mask-heads`` it masks the top ``--k``, as a detection run does. Their models are not the backbones of the
four VLMs with published lists (Llama-2, Mistral, Mixtral, Qwen1.5, Yi; InternVL2-8B, Qwen2-VL-2B), so the
atlas does not use them; the files are not among the project's real files, so their test skips here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Head = tuple[int, int]

QRHEAD_REPO = "princeton-pli/QRHead"
QRHEAD_DIR = "src/qrretriever/configs"
QRHEAD_RULE = ("QRHead's top 16 by QR score (attention of the query tokens to the gold documents, calibrated "
               "by a null query), found on {data}; the file gives the set, not the scores")


@dataclass(frozen=True)
class PublishedHeads:
    """One published list: where it comes from, its model's grid, its heads in the file's order."""

    method: str  # the name's prefix: "qrhead"
    model: str  # the model as the authors name it
    data: str  # what the heads were found on (NQ, LME = LongMemEval, mid)
    hub_id: str  # the checkpoint the file names (model_name_or_path)
    backbone: str  # the language-model family and size, as the paper's Tab. A7 names its VLMs' backbones
    num_layers: int  # the model's LM grid (layers x query heads)
    num_heads: int
    grid_source: str  # where the grid was read
    text: str  # the file's attn_head_set, verbatim
    sep: str  # the file's layer/head separator
    repo: str
    commit: str
    path: str
    file: str  # the byte copy's name in ../shared/real/heads/qrhead/
    ranking_rule: str
    ranked: bool = False  # a top-k set, not a ranking (module docstring)
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.method}:{self.model}/{self.data}"

    @property
    def heads(self) -> tuple[Head, ...]:
        return parse_head_text(self.text, self.sep)

    @property
    def outside_grid(self) -> tuple[Head, ...]:
        """Heads of the file that do not exist on its model's grid (a file that does not fit its model)."""
        return tuple(h for h in self.heads if not (0 <= h[0] < self.num_layers and 0 <= h[1] < self.num_heads))

    @property
    def source(self) -> str:
        return f"github {self.repo} {self.path} @ {self.commit}"


def parse_head_text(text: str, sep: str) -> tuple[Head, ...]:
    """A published ``attn_head_set`` string as ``(layer, head)`` pairs, in its order.

    >>> parse_head_text("16-19,16-2", "-"), parse_head_text("10_3, 10_24", "_")
    (((16, 19), (16, 2)), ((10, 3), (10, 24)))
    """
    out = []
    for item in text.split(","):
        layer, _, head = item.strip().partition(sep)
        out.append((int(layer), int(head)))
    return tuple(out)


_QWEN25_GRID = ("28 x 28: the LM of Qwen2.5-VL-7B (../shared/real/checkpoints/qwen2_5_vl_7b/config.json) and of "
                "InternVL3-8B (internvl3_8b_hf/config.json, LM = Qwen2.5-7B); the paper's Tab. A7")
_QWEN3_GRID = "36 x 32: the paper's Tab. A7 for Qwen3-VL-8B and InternVL3.5-8B, whose LM is Qwen3-8B"
_LLAMA_GRID = ("32 x 32: Llama 3 8B's shape (llama3_llava_next_8b_hf/config.json, LlamaConfig's defaults; Magma-8B's "
               "config: 32 layers, 32 heads); Llama 3.1 8B keeps the shape")
_GEMMA_GRID = ("34 x 8: google/gemma-3-4b text_config (num_hidden_layers 34, num_attention_heads 8, num_key_value_heads "
               "4), as public copies of the config give it")


def _qr(model, data, hub, backbone, grid, grid_source, text, sep, commit, fname, note=""):
    return PublishedHeads("qrhead", model, data, hub, backbone, grid[0], grid[1], grid_source, text, sep,
                          QRHEAD_REPO, commit, f"{QRHEAD_DIR}/{fname}", fname,
                          QRHEAD_RULE.format(data={"NQ": "Natural Questions", "LME": "LongMemEval"}.get(data, data)),
                          note=note)


PUBLISHED: tuple[PublishedHeads, ...] = (
    _qr("Qwen2.5-7B-Instruct", "NQ", "Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B", (28, 28), _QWEN25_GRID,
        "16-19,16-2,16-20,16-14,16-0,15-24,16-18,17-18,16-1,19-18,19-19,18-16,16-17,19-25,19-17,20-21", "-",
        "217ee8fc6fa4d985d1faebf97209e3cb58b5dfac", "Qwen2.5-7B-Instruct_qr_head_NQ.yaml"),
    _qr("Qwen3-8B", "NQ", "Qwen/Qwen3-8B", "Qwen3-8B", (36, 32), _QWEN3_GRID,
        "21-31,21-18,20-15,22-4,21-11,20-16,21-17,19-13,21-10,21-8,18-5,20-14,19-14,24-13,17-4,19-28", "-",
        "e2bf69fea080b73b6bea932a28e1e6101a8be0c6", "Qwen3-8B_qr_head_NQ.yaml"),
    _qr("Llama-3.1-8B-Instruct", "NQ", "meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B", (32, 32), _LLAMA_GRID,
        "14-22,13-16,14-28,14-31,16-19,14-1,16-26,17-24,14-0,13-0,16-25,13-12,13-1,13-10,17-27,20-14", "-",
        "3ce72893338daac9043cdf8b7b86d5a69e3576c6", "Llama-3.1-8B-Instruct_qr_head_NQ.yaml"),
    _qr("Llama-3.1-8B-Instruct", "LME", "meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B", (32, 32), _LLAMA_GRID,
        "13-18,13-21,8-11,14-13,17-29,13-1,13-13,14-29,14-31,13-8,16-1,17-21,13-3,10-31,13-4,14-22", "-",
        "1c26ca690c4bac799ffcd397bce9e20ae21ca55e", "Llama-3.1-8B-Instruct_qr_head_LME.yaml"),
    _qr("Gemma-3-4B-it", "mid", "google/gemma-3-4b-it", "Gemma-3-4B", (34, 8), _GEMMA_GRID,
        "10_3,10_24,11_11,11_2,12_4,12_5,13_8,13_17,14_8,14_24,15_7,15_31,16_25,16_12,17_28,17_25,18_31,18_29,"
        "19_1,19_25,20_23,20_27,21_28,21_30", "_",
        "9745fd912169fae11ae83979a9d2ea99839318f2", "Gemma-3-4B-it_mid_head.yaml",
        note="24 'mid' heads (layers 10-21, two per layer); 18 of them name a head 8-31 of a model with 8 query heads "
             "per layer, so the file does not fit google/gemma-3-4b-it as Hugging Face numbers its heads: refused as "
             "a head set"),
)

@dataclass(frozen=True)
class PublishedMap:
    """One published per-head score map: a whole ``[L][H]`` map, so a ranking of every head."""

    method: str  # "retrieval-heads" | "ocr-heads"
    model: str
    kind: str  # "" (Retrieval Heads) | "image" | "text" (OCR Heads' two detections)
    num_layers: int
    num_heads: int
    repo: str
    commit: str
    path: str
    blob: str  # the file's git blob id at that commit
    size: int  # its bytes
    text: str  # the map, layer rows joined by ";", heads by ","

    @property
    def name(self) -> str:
        return f"{self.method}:{self.model}" + (f"/{self.kind}" if self.kind else "")

    @property
    def scores(self) -> tuple[tuple[float, ...], ...]:
        return tuple(tuple(float(x) for x in row.split(",")) for row in self.text.split(";"))

    @property
    def ranking(self) -> tuple[Head, ...]:
        """Every head, best first; ties by (layer, head), as :func:`vrh.core.heads.rank_heads` breaks them."""
        s = self.scores
        return tuple(sorted(((l, h) for l in range(self.num_layers) for h in range(self.num_heads)),
                            key=lambda lh: (-s[lh[0]][lh[1]], lh)))

    @property
    def ranking_rule(self) -> str:
        if self.method == "retrieval-heads":
            return "Retrieval Heads' copy-paste score, the mean over the file's detections (its README's ranking)"
        return ("OCR Heads' step3 score: the mean over the file's samples where more than 10% of them are 0, else 0 "
                "(its OCR heads: score >= 0.1)")

    @property
    def source(self) -> str:
        return f"github {self.repo} {self.path} @ {self.commit} (blob {self.blob[:12]}, {self.size} bytes)"


def _maps() -> tuple[PublishedMap, ...]:
    from vrh.data.published_score_maps import MAPS

    return tuple(PublishedMap(*row[:10], "".join(row[10])) for row in MAPS)


MAP_PREFIXES = ("ocr-heads:", "retrieval-heads:")
PREFIXES = tuple(sorted({p.method + ":" for p in PUBLISHED} | set(MAP_PREFIXES)))


def is_published_spec(spec: Any) -> bool:
    """Whether a head-set option names a published list of another method (``qrhead:...``)."""
    return isinstance(spec, str) and spec.strip().lower().startswith(PREFIXES)


def published_names() -> list[str]:
    return [p.name for p in PUBLISHED] + [m.name for m in _maps()]


def published_map(spec: str, num_layers: int | None = None, num_heads: int | None = None,
                  option: str = "--mask-heads") -> PublishedMap:
    """Resolve ``retrieval-heads:MODEL`` or ``ocr-heads:MODEL/KIND`` (case-insensitive), checked against the
    loaded model's grid when given.

    >>> m = published_map("retrieval-heads:llama-2-7b-80k")
    >>> m.ranking[:3], (m.num_layers, m.num_heads)
    (((16, 19), (11, 15), (8, 26)), (32, 32))
    """
    want = spec.strip().lower()
    m = next((m for m in _maps() if m.name.lower() == want), None)
    if m is None:
        raise ValueError(f"{option} {spec}: no such published score map; vrh ships: "
                         f"{', '.join(x.name for x in _maps())} (vrh heads list)")
    if num_layers is not None and (num_layers, num_heads) != (m.num_layers, m.num_heads):
        raise ValueError(f"{option} {spec} scores heads of {m.model} ({m.num_layers} layers x {m.num_heads} heads); "
                         f"this model has {num_layers} layers x {num_heads} heads")
    return m


def published_heads(spec: str, num_layers: int | None = None, num_heads: int | None = None,
                    option: str = "--mask-heads") -> PublishedHeads:
    """Resolve ``qrhead:MODEL/DATA`` (case-insensitive), checked against its own model's grid and, when given,
    the loaded model's ``num_layers`` x ``num_heads``.

    >>> p = published_heads("qrhead:Qwen2.5-7B-Instruct/NQ", 28, 28)
    >>> p.name, len(p.heads), p.heads[0], p.ranked
    ('qrhead:Qwen2.5-7B-Instruct/NQ', 16, (16, 19), False)
    >>> published_heads("qrhead:Qwen3-8B/NQ", 28, 28)
    Traceback (most recent call last):
    ValueError: --mask-heads qrhead:Qwen3-8B/NQ lists heads of Qwen3-8B (36 layers x 32 heads); this model has 28 layers x 28 heads
    """
    if spec.strip().lower().startswith(MAP_PREFIXES):
        raise ValueError(f"{option} {spec}: a score map, not a list (published_map)")
    want = spec.strip().lower()
    p = next((p for p in PUBLISHED if p.name.lower() == want), None)
    if p is None:
        raise ValueError(f"{option} {spec}: no such published head list; vrh ships: {', '.join(published_names())} "
                         "(vrh heads list)")
    bad = p.outside_grid
    if bad:
        raise ValueError(f"{option} {p.name}: {len(bad)} of its {len(p.heads)} heads (e.g. "
                         f"{bad[0][0]}:{bad[0][1]}) lie outside {p.model}'s {p.num_layers} layers x {p.num_heads} heads: "
                         f"the published file ({p.file}) does not fit its model; refused")
    if num_layers is not None and (num_layers, num_heads) != (p.num_layers, p.num_heads):
        raise ValueError(f"{option} {spec} lists heads of {p.model} ({p.num_layers} layers x {p.num_heads} heads); "
                         f"this model has {num_layers} layers x {num_heads} heads")
    return p


@dataclass(frozen=True)
class NamedHeads:
    """A named head set resolved, whichever table it comes from (the paper's or another method's)."""

    name: str
    kind: str  # "visual" (the paper's VRHs) or "text" (a text retrieval method's heads)
    heads: tuple[Head, ...]
    num_layers: int
    num_heads: int
    ranked: bool  # whether the order is a ranking (top-k comparisons make sense)
    source: str
    scores: tuple[tuple[float, ...], ...] | None = None  # a whole [L][H] map (heads: every head, best first)


def is_named_spec(spec: Any) -> bool:
    """Whether a head-set option names a shipped list (``paper:...`` or ``qrhead:...``)."""
    from vrh.data.paper_heads import is_paper_spec

    return is_paper_spec(spec) or is_published_spec(spec)


def named_heads(spec: str, num_layers: int | None = None, num_heads: int | None = None,
                option: str = "--mask-heads") -> NamedHeads:
    """Resolve any named head set, checked as :func:`published_heads` and
    :func:`vrh.data.paper_heads.paper_heads` check theirs.

    >>> n = named_heads("paper:Qwen2.5-VL-7B/RefCOCO")
    >>> n.kind, len(n.heads), n.ranked, (n.num_layers, n.num_heads)
    ('visual', 20, True, (28, 28))
    """
    from vrh.data.paper_heads import is_paper_spec, paper_heads

    if is_paper_spec(spec):
        p = paper_heads(spec, num_layers, num_heads, option)
        return NamedHeads(p.name, "visual", p.heads, p.num_layers, p.num_heads, True,
                          "the paper's top-20 VRHs (App. D, Tab. A2-A6), rank 1 first")
    if is_published_spec(spec) and spec.strip().lower().startswith(MAP_PREFIXES):
        m = published_map(spec, num_layers, num_heads, option)
        return NamedHeads(m.name, "visual" if m.kind == "image" else "text", m.ranking, m.num_layers, m.num_heads,
                          True, m.source, m.scores)
    if is_published_spec(spec):
        q = published_heads(spec, num_layers, num_heads, option)
        return NamedHeads(q.name, "text", q.heads, q.num_layers, q.num_heads, q.ranked, q.source)
    raise ValueError(f"{option} {spec}: not a named head set (paper:MODEL/BENCHMARK or "
                     f"{'|'.join(p + 'MODEL/DATA' for p in PREFIXES)})")


def all_named_sets() -> list[dict[str, Any]]:
    """Every named set vrh ships, for ``vrh heads list``: name, kind, size, grid, ranked, source, its ranking
    rule and a note."""
    from vrh.data.paper_heads import paper_head_sets, paper_heads

    rows = []
    for bench, models in paper_head_sets().items():
        for m in models:
            p = paper_heads(f"paper:{m}/{bench}")
            rows.append({"name": p.name, "kind": "visual", "n": len(p.heads), "grid": (p.num_layers, p.num_heads),
                         "ranked": True, "source": "the paper, App. D (Tab. A2-A6), vrh.data.paper_numbers",
                         "rule": "the paper's top 20 by its Eq. 1 score on the benchmark, rank 1 first", "note": ""})
    for q in PUBLISHED:
        rows.append({"name": q.name, "kind": "text", "n": len(q.heads), "grid": (q.num_layers, q.num_heads),
                     "ranked": q.ranked, "source": q.source, "rule": q.ranking_rule, "note": q.note})
    for m in _maps():
        rows.append({"name": m.name, "kind": "visual" if m.kind == "image" else "text",
                     "n": m.num_layers * m.num_heads, "grid": (m.num_layers, m.num_heads), "ranked": True,
                     "source": m.source, "rule": f"a score map: {m.ranking_rule}", "note": ""})
    return rows
