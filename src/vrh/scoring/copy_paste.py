"""Retrieval Heads' copy-paste score on text (Wu et al. 2024), as its reference code computes it.

Reference: ``nightdessert/Retrieval_Head`` @ 3ac171a6 (the repository's head; the file last changed in
c729a0e), ``retrieval_head_detection.py``:

* L287-290: prefill the prompt minus its last token, then decode greedily feeding that last token first:
  the attention row read at each decode step is the query row that *produces* the step's token;
* L221-229 ``retrieval_calculate``: per (layer, head), the top-1 key of that row over ALL keys seen so far
  (``topk(1)`` of the last row); a hit when the key lies in the needle span ``[needle_start, needle_end)``
  AND the token just produced equals the prompt token at that key (the copy); a hit adds
  ``1 / (needle_end - needle_start)``, so a test's score is hits / needle length in tokens;
* L249-259 ``find_needle_idx``: the needle span is the needle sentence's tokens in the prompt;
* L296-300: a test's scores are kept only when the answer's ROUGE-1 recall of the needle is > 50, and a
  head's score is the mean over kept tests (L230-233, ``np.mean``).

vrh keeps all of it but the ROUGE filter, which becomes an exact judge (the needle's values, no more and
no fewer: :func:`vrh.experiments.needles.judge`), and it reads the rows from vrh's one capture
(:func:`vrh.core.capture.capture_generation_rows`: the decode step's row, as at L240-245) instead of
eager attention maps. Ties: the lowest key position wins (``torch.topk`` leaves them unspecified); an
all-zero row never hits (:func:`vrh.scoring.functions.argmax_in_region`'s policy).
"""

from __future__ import annotations

import torch

from vrh.scoring.functions import check_rows


def copy_paste_sample(rows: torch.Tensor, key_ids: torch.Tensor, out_ids: torch.Tensor, span: tuple[int, int]
                      ) -> torch.Tensor:
    """One test's ``[L, H]`` copy-paste scores: output tokens whose top-1 key lies in the needle span
    ``[start, end)`` and holds the same token id as the one produced, divided by the span's length.

    ``rows``: ``[L, H, Q, S]``, row ``q`` the one that produced ``out_ids[q]``; ``key_ids``: ``[>= S]`` the
    token id at every key position (prompt then generated tokens).

    >>> rows = torch.tensor([[[[0.1, 0.7, 0.1, 0.1], [0.1, 0.1, 0.7, 0.1], [0.6, 0.2, 0.1, 0.1]]]])  # (1,1,3,4)
    >>> ids = torch.tensor([5, 8, 9, 2])  # keys 1-2 are the needle "8 9"
    >>> copy_paste_sample(rows, ids, out_ids=torch.tensor([8, 9, 2]), span=(1, 3))  # 2 copies / 2 tokens
    tensor([[1.]])
    >>> copy_paste_sample(rows, ids, out_ids=torch.tensor([8, 7, 2]), span=(1, 3))  # 7 is no copy of key 2
    tensor([[0.5000]])
    """
    check_rows(rows)
    L, H, Q, S = rows.shape
    start, end = int(span[0]), int(span[1])
    if not 0 <= start < end <= S:
        raise ValueError(f"needle span [{start}, {end}) must be a non-empty range inside the {S} keys")
    if out_ids.numel() != Q or key_ids.numel() < S:
        raise ValueError(f"got {out_ids.numel()} output ids for {Q} rows and {key_ids.numel()} key ids for {S} keys")
    if Q == 0:
        return torch.zeros(L, H)
    top = rows.argmax(-1)  # (L, H, Q): first maximum on ties
    peak = rows.gather(-1, top.unsqueeze(-1)).squeeze(-1)  # (L, H, Q)
    ids = key_ids.reshape(-1)[:S].to(top.device)
    copied = ids[top] == out_ids.reshape(1, 1, Q).to(top.device)  # (L, H, Q)
    hit = (top >= start) & (top < end) & copied & (peak > 0)  # (L, H, Q)
    return (hit.double().sum(-1) / (end - start)).float().cpu()  # (L, H)
