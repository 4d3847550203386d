"""QRHead's query-focused score on ``vrh text-heads``' needle tests (``--text-scorer qrhead``): the second text
retrieval head definition, the one the published QRHead lists use (:mod:`vrh.data.published_heads`).

Retrieval Heads (the default, :mod:`vrh.scoring.copy_paste`) score a head by what the *answer* copies; QRHead
by where the *query* looks. Mapped onto a needle test, as QRHead's LongMemEval detection maps a question and
its gold document (``exp_scripts/detection/detect_qrhead_lme.py``; the per-document score is
``score_docs_per_head_for_detection`` of ``src/qrretriever/attn_retriever.py``, as :mod:`vrh.scoring.qrhead`
cites to the line):

* the **query** is the question at the end of the prompt through the chat template's suffix (the reference's
  query span also runs to the end of the prompt, the assistant header included);
* the **gold document** is the needle's tokens (the same span copy-paste uses);
* the **null query** replaces the question: QRHead's ``"N/A"`` for English haystacks, ``where is the ?`` (the
  question without its content words, all in the organisms' vocabulary) for ``items``; the tokens before the
  question are the same in both prompts, so the needle's keys pair one to one;
* the score is :func:`vrh.scoring.qrhead.qrhead_sample` (query-averaged attention on each needle key, minus the
  null query's, low outlier keys dropped, the rest summed), and a head's score is its mean over **all** tests,
  as the reference averages over every question (not only those answered right: the score does not read the
  answer).

Two forwards per test (prompt, null prompt), prefill only, rows of the query positions only (vrh's one capture).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

NULL_QUESTION = {"sentences": "N/A", "items": "where is the ?"}


def _offsets(tok: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    bos = getattr(tok, "bos_token", None)
    enc = tok(text, add_special_tokens=not (bos and text.startswith(bos)), return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def _first_token_at(offsets: Sequence[tuple[int, int]], char: int) -> int:
    return next(i for i, (s, e) in enumerate(offsets) if e > s and e > char)


def query_prompts(tok: Any, wrap: Callable[[str], str], body: str, question: str, needle: str, style: str
                  ) -> dict[str, Any]:
    """The two prompts of one test: ``ids`` / ``null_ids``, the first query token ``q0`` (shared by both: the
    tokens before it are the same), and the needle's token span ``keys`` (``[start, end)``, the same in both,
    before ``q0``). Refuses a prompt whose question is not its end, or whose needle does not pair."""
    if not question or not body.endswith(question):
        raise ValueError("--text-scorer qrhead: the needle test's question is not the end of its prompt")
    null_body = body[: len(body) - len(question)] + NULL_QUESTION[style]
    out = {}
    for key, b, q in (("", body, question), ("null_", null_body, NULL_QUESTION[style])):
        text = wrap(b)
        ids, offs = _offsets(tok, text)
        c_q, c_n = text.rindex(q), text.index(needle)
        inside = [i for i, (s, e) in enumerate(offs) if e > s and s < c_n + len(needle) and e > c_n]
        out[key + "ids"], out[key + "q0"], out[key + "keys"] = ids, _first_token_at(offs, c_q), (min(inside),
                                                                                             max(inside) + 1)
    # the query starts at the first token of either question, or earlier where the two prompts' tokens part (a
    # byte-level tokenizer may give the space before "N/A" a token of its own): both then start at one position
    common = next((i for i, (x, y) in enumerate(zip(out["ids"], out["null_ids"])) if x != y),
                  min(len(out["ids"]), len(out["null_ids"])))
    q0 = min(out["q0"], out["null_q0"], common)
    if out["null_keys"] != out["keys"] or out["keys"][1] > q0:
        raise ValueError("--text-scorer qrhead: the prompt and its null-query copy tokenize differently before the "
                         "question, so their keys do not pair")
    return {"ids": out["ids"], "null_ids": out["null_ids"], "q0": q0, "keys": out["keys"]}


@torch.no_grad()
def query_rows(lm: Any, ids: Sequence[int], q0: int) -> torch.Tensor:
    """``[L, H, Q, S]`` softmax rows of the query positions ``q0 .. P-1`` in one prefill forward."""
    from vrh.core.capture import capture_attention_rows
    from vrh.core.layout import SEQUENCE

    x = torch.tensor([list(ids)], device=lm.device)  # (1, P)
    positions = torch.arange(q0, x.shape[1])  # (Q,)
    with capture_attention_rows(lm.model, lm.adapter, [positions], keys=SEQUENCE) as cap:
        lm.model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False)
    return cap.rows(0)  # (L, H, Q, S)


def qrhead_text_map(lm: Any, tok: Any, wrap: Callable[[str], str], prompt: Any, outlier_z: float = 2.0
                    ) -> torch.Tensor:
    """One needle test's ``[L, H]`` QRHead score (module docstring)."""
    from vrh.scoring.qrhead import qrhead_sample

    p = query_prompts(tok, wrap, prompt.body, prompt.question, prompt.needle, prompt.style)
    rows = query_rows(lm, p["ids"], p["q0"])  # (L, H, Q, S)
    null_rows = query_rows(lm, p["null_ids"], p["q0"])  # (L, H, Q_null, S_null)
    keys = list(range(*p["keys"]))
    return qrhead_sample(rows, keys, list(range(rows.shape[2])), null_rows, keys, list(range(null_rows.shape[2])),
                         outlier_z=outlier_z)
