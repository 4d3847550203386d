"""Localization Heads against the authors' two selections -- the current one (liu-hanyu-97/LocalizationHeads
analyze.py, the defaults) in :func:`_reference_current` and the original (aysanaghazadeh/LocalizationHeads
localization_heads_finder.py, ``ORIGINAL``) in :func:`_reference_order`, followed line by line on numpy -- and
hand-computed worked examples."""

import math

import numpy as np
import pytest
import torch

from vrh.core.heads import rank_heads
from vrh.scoring import make_scorer
from vrh.scoring.localization_heads import (
    ORIGINAL,
    connected_components,
    elbow_point,
    localization_heads_sample,
    spatial_entropy,
)

ORIG = dict(elbow="index", min_layer=0, shift=1.0, bottom_row=float("inf"), min_keep=0)  # ORIGINAL's options


def _reference_entropy(S, threshold=0.001, shift=1.0):
    """spatial_entropy (original L195-246; current analyze.py L20-42 with shift 2) on a numpy [P, P] float32 map."""
    ndimage = pytest.importorskip("scipy.ndimage")
    B = np.maximum(S - S.mean() * shift, 0).astype(np.float32)  # relu(S_h - shift * mean)
    labels, n = ndimage.label((B > threshold).astype(np.int32), structure=np.ones((3, 3)))
    total = float(B.sum())
    if total <= 0:
        return float("inf")
    sums = [B[labels == i].sum() for i in range(1, n + 1)]
    probs = [c / total for c in sums if c > 0]
    return -sum(p * np.log(p) for p in probs if p > 0) if probs else 0


def _elbow_dist(y):
    pts = np.array([(i, v) for i, v in enumerate(y)])
    line = pts[-1] - pts[0]
    unit = line / np.linalg.norm(line)
    vec = pts - pts[0]
    return np.linalg.norm(vec - np.outer(vec @ unit, unit), axis=1)


def _reference_order(attn, P):
    """analyze_attention_file, L353-424: (layer, head) list sorted by entropy, plus the entropies."""
    L, H = attn.shape[:2]
    idx = list(range(L * H))
    sums = [float(attn[l, h].sum()) for l in range(L) for h in range(H)]
    order = np.argsort(np.array(sums), kind="stable")  # find_elbow_point L265
    thr = np.array(idx)[order][int(np.argmax(_elbow_dist(np.array(sums)[order])))]
    res = []
    for l in range(L):
        for h in range(H):
            se = _reference_entropy(attn[l, h].reshape(P, P)) if l * H + h >= thr else float("inf")
            res.append(((l, h), se))
    res.sort(key=lambda r: r[1])
    return res


def _reference_current(attn, P, min_keep=1):
    """analyze_heads, analyze.py L95-152 @ c910d443: the kept (layer, head) list, sorted by entropy."""
    L, H = attn.shape[:2]
    sums = [float(attn[l, h].sum()) for l in range(L) for h in range(H)]
    vals = np.array(sums, dtype=np.float64)
    y = vals[np.argsort(vals)]
    thr = float(y[int(np.argmax(_elbow_dist(y)))]) if len(y) > 2 else min(sums)  # elbow_chord L45-63
    results = []
    for l in range(L):
        for h in range(H):
            s = sums[l * H + h]
            if s < thr:
                se, bottom = float("inf"), False
            else:
                a2d = attn[l, h].reshape(P, P)
                se, bottom = _reference_entropy(a2d, shift=2.0), bool((a2d[-1, :] > 0.05).any())
            results.append(dict(layer=l, head=h, sum=s, se=se, bottom=bottom))
    kept = [r for r in results if np.isfinite(r["se"]) and r["sum"] >= thr and not r["bottom"] and r["layer"] > 1]
    if len(kept) < min_keep:
        by_sum = sorted(results, key=lambda x: x["sum"], reverse=True)
        kept = [x for x in by_sum if not x["bottom"]][:min_keep]
    kept.sort(key=lambda x: x["se"])
    return [((r["layer"], r["head"]), r["se"]) for r in kept]


def _rows(seed, L=6, H=4, P=4, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(L, H, 1, 3 + P * P, generator=g) * scale, -1)  # (L, H, 1, S): 3 text keys


@pytest.mark.parametrize("seed", range(8))
def test_default_matches_the_authors_current_code_on_random_rows(seed):
    P = 4
    rows = _rows(seed, scale=1.0 + seed % 4)  # flatter and more peaked maps: bottom-row drops and fallbacks
    ref = _reference_current(rows[:, :, 0, 3:].numpy().astype(np.float32), P)
    score = localization_heads_sample(rows, list(range(3, 3 + P * P)), (P, P), [0])  # defaults = current
    assert {lh for lh, _ in ref} == {(l, h) for l, h in (score > 0).nonzero().tolist()}
    ent = 1.0 / score.double() - 1.0  # score = 1 / (1 + entropy)
    for (l, h), se in ref:
        if math.isfinite(se):
            assert abs(float(ent[l, h]) - se) < 1e-5 * max(1.0, se)
    finite = sorted([(round(se, 6), lh) for lh, se in ref if math.isfinite(se)])
    assert rank_heads(score)[: len(finite)] == [lh for _, lh in finite]


def test_current_code_bottom_row_layer_rule_and_fallback(info_of):
    L, H, P = 4, 1, 3
    A = torch.zeros(L, H, 1, 1 + P * P)  # (L, H, 1, S): key 0 text, keys 1..9 a 3x3 grid
    A[..., 0] = 1.0
    A[0, 0, 0] = 0.0
    A[0, 0, 0, 5] = 1.0  # layer 0: one central blob, the largest sum -- but layer <= 1
    A[2, 0, 0] = 0.0
    A[2, 0, 0, 8] = 1.0  # layer 2: one blob on the bottom row (cell 7 of 0..8) -> dropped
    A[3, 0, 0] = 0.0
    A[3, 0, 0, [1, 2]] = 0.5  # layer 3: one blob in the top row
    vis = list(range(1, 10))
    cur = localization_heads_sample(A, vis, (P, P), [0])
    assert cur.flatten().tolist() == [0.0, 0.0, 0.0, 1.0]  # only layer 3 is kept
    assert _reference_current(A[:, :, 0, 1:].numpy(), P) == [((3, 0), 0.0)]
    A[3] = A[1]  # layer 3 now looks at text only: nothing kept -> the largest-sum head not on the bottom row
    fallback = localization_heads_sample(A, vis, (P, P), [0])
    assert fallback.flatten().tolist() == [1.0, 0.0, 0.0, 0.0]  # layer 0, although layer <= 1
    assert [lh for lh, _ in _reference_current(A[:, :, 0, 1:].numpy(), P)] == [(0, 0)]
    assert localization_heads_sample(A, vis, (P, P), [0], min_keep=0).sum() == 0  # no fallback
    assert localization_heads_sample(A, vis, (P, P), [0], bottom_row=float("inf"))[2, 0] == 1.0  # no rule
    sc = make_scorer("localization_heads:m=1")
    sc.update(A, info_of(visual_positions=vis, grid=(P, P), queries={"last_prompt": [0]}))
    assert sc.result().flatten().tolist() == [1.0, 0.0, 0.0, 0.0]


def test_original_spec_names_the_original_options():
    sc = make_scorer(ORIGINAL)
    assert sc.name == ORIGINAL
    assert {k: sc.options[k] for k in ORIG} == ORIG
    with pytest.raises(ValueError, match="elbow_axes"):
        make_scorer("localization_heads:elbow_axes=scaled")  # removed: rescaling an axis never moves the elbow


@pytest.mark.parametrize("seed", range(5))
def test_original_variant_matches_the_original_code_on_random_rows(seed):
    g = torch.Generator().manual_seed(seed)
    L, H, P = 6, 4, 4
    rows = torch.softmax(torch.randn(L, H, 1, 3 + P * P, generator=g) * 3, -1)  # (L, H, 1, S): 3 text keys
    visual = list(range(3, 3 + P * P))
    ref = _reference_order(rows[:, :, 0, 3:].numpy().astype(np.float32), P)
    score = localization_heads_sample(rows, visual, (P, P), [0], **ORIG)
    ent = 1.0 / score.double() - 1.0  # score = 1 / (1 + entropy)
    for (l, h), se in ref:
        if math.isinf(se):
            assert score[l, h] == 0
        else:
            assert abs(float(ent[l, h]) - se) < 1e-5 * max(1.0, se)
    # identical ranking, ties in (layer, head) order; the reference's float32 p = comp / total can leave a
    # single blob at 6e-8 instead of 0, so entropies are compared at 1e-6
    finite = sorted([(round(se, 6), lh) for lh, se in ref if not math.isinf(se)])
    assert rank_heads(score)[: len(finite)] == [lh for _, lh in finite]


def test_spatial_entropy_worked_examples_and_edge_cases():
    one = torch.zeros(1, 3, 3)
    one[0, 1, 1] = 0.9  # one blob -> 0
    assert float(spatial_entropy(one)) == 0.0
    four = torch.zeros(1, 3, 3)
    four[0, 0, 0] = four[0, 0, 2] = four[0, 2, 0] = four[0, 2, 2] = 0.25  # mean 1/9; 4 equal blobs -> ln 4
    assert math.isclose(float(spatial_entropy(four)), math.log(4), rel_tol=1e-5)
    assert math.isinf(float(spatial_entropy(torch.full((1, 2, 2), 0.25))))  # constant: sum relu = 0 -> inf
    # no component above the threshold: relu(S - mean) <= 0.001 everywhere but positive somewhere -> 0
    faint = torch.full((1, 2, 2), 0.25)
    faint[0, 0, 0] += 0.001  # mean .25025, relu = .00075 at (0, 0): below .001
    assert float(spatial_entropy(faint, shift=1.0)) == 0.0
    assert math.isinf(float(spatial_entropy(faint, empty="inf", shift=1.0)))
    # mass=raw keeps the empty rule (it scored inf whatever `empty` said); only a map with no cell above the
    # shifted mean is inf, for either mass
    assert float(spatial_entropy(faint, mass="raw", shift=1.0)) == 0.0
    assert math.isinf(float(spatial_entropy(faint, mass="raw", empty="inf", shift=1.0)))
    assert math.isinf(float(spatial_entropy(torch.full((1, 2, 2), 0.25), mass="raw")))
    assert math.isinf(float(spatial_entropy(faint)))  # shift 2: no cell above twice the mean -> inf
    # cells in (0, threshold] count in the total: blob .3 - .1 = .2 above, a faint cell .0005 not a component
    m = torch.tensor([[[0.3, 0.0, 0.1005], [0.0, 0.1, 0.1], [0.1, 0.1, 0.1]]])  # sum .9005, mean .100056
    B = torch.relu(m - m.mean())  # shift 1 (the original)
    p = float(B[0, 0, 0] / B.sum())  # the one component's share, < 1
    assert math.isclose(float(spatial_entropy(m, shift=1.0)), -p * math.log(p), rel_tol=1e-4)
    assert float(spatial_entropy(m, mass="raw", shift=1.0)) == 0.0  # vrh's earlier choice: p over components = 1


def test_elbow_point_worked_examples():
    order, i = elbow_point(torch.tensor([5.0, 5.0, 5.0]))
    assert i == 0 and order.tolist() == [0, 1, 2]  # flat curve -> rank 0 (ties stable)
    assert elbow_point(torch.tensor([1.0]))[1] == 0
    # raw axes: ranks 0..5 against sums 0..1 -- the chord is nearly flat, the elbow is the largest jump's foot
    vals = torch.tensor([0.0, 0.01, 0.02, 0.03, 0.5, 1.0])
    assert elbow_point(vals)[1] == 3
    # rescaling an axis never moves the elbow (every distance to the chord scales alike): vrh's earlier
    # "scaled" geometry was the raw one, hence no option
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        v = torch.rand(12, generator=g) ** 3
        assert elbow_point(v)[1] == elbow_point(v * 1000)[1] == elbow_point(v / 7)[1]


def test_connected_components_match_scipy_if_available():
    ndimage = pytest.importorskip("scipy.ndimage")
    g = torch.Generator().manual_seed(0)
    masks = torch.rand(20, 6, 7, generator=g) > 0.55  # (20, 6, 7)
    lab = connected_components(masks)
    for b in range(20):
        ref, n = ndimage.label(masks[b].numpy(), structure=[[1, 1, 1]] * 3)
        ours = lab[b].numpy()
        assert len(set(ours[ours > 0].tolist())) == n
        pairs = {(int(x), int(y)) for x, y in zip(ours.ravel(), ref.ravel())}
        assert len(pairs) == n + (1 if (ref == 0).any() else 0)  # a bijection between labelings


def _planted():
    L, H, S = 4, 2, 1 + 9
    A = torch.zeros(L, H, 1, S)  # (L, H, 1, S): key 0 text, keys 1..9 a 3x3 grid
    A[..., 0] = 1.0  # by default all attention on text -> image sum 0
    A[2, 1, 0] = 0.0
    A[2, 1, 0, 1:3] = 0.5  # one blob
    A[3, 0, 0] = 0.0
    A[3, 0, 0, [1, 9]] = 0.5  # two blobs -> ln 2
    A[1, 0, 0] = 0.0
    A[1, 0, 0, 5] = 1.0  # one cell, layer 1
    return A


def test_index_cut_versus_value_cut_and_layer_exclusion(info_of):
    A = _planted()
    # sums: 0 for five heads, 1 for (1,0), (2,1), (3,0); ascending stable order puts the elbow at the last 0
    # (flat index 7 = (3, 1)): the index cut keeps flat indices >= 7 only -> (3, 1) (inf: no mass) only
    ref = localization_heads_sample(A, list(range(1, 10)), (3, 3), [0], **ORIG)
    assert torch.equal(ref, torch.zeros(4, 2))
    # sum >= 0: every head
    val = localization_heads_sample(A, list(range(1, 10)), (3, 3), [0], **{**ORIG, "elbow": "value"})
    assert val[1, 0] == 1.0 and val[2, 1] == 1.0 and math.isclose(float(val[3, 0]), 1 / (1 + math.log(2)),
                                                                   rel_tol=1e-5)
    late = localization_heads_sample(A, list(range(1, 10)), (3, 3), [0], **{**ORIG, "elbow": "value", "min_layer": 2})
    assert late[1, 0] == 0 and (late > 0).sum() == 2
    info = info_of(visual_positions=list(range(1, 10)), grid=(3, 3), queries={"last_prompt": [0]})
    sc = make_scorer(ORIGINAL.replace("elbow=index", "elbow=value") + ":m=1")
    sc.update(A, info)
    sc.update(A, info)
    assert sc.name == "localization_heads:bottom_row=inf:m=1:min_keep=0:min_layer=0:shift=1.0"
    assert sc.result()[1, 0] == 1.0 and sc.result().sum() == 1.0  # ties (entropy 0) -> (layer, head) order
    both = make_scorer("localization_heads:bottom_row=inf:m=2:min_keep=0:shift=1")
    both.update(A, info)
    assert both.result()[2, 1] == 1.0 and both.result()[3, 0] == 1.0 and both.result().sum() == 2.0
    with pytest.raises(ValueError, match="grid"):
        make_scorer("localization_heads").update(A, info_of(grid=None))
    with pytest.raises(ValueError, match="cells"):
        localization_heads_sample(A, list(range(1, 10)), (2, 3), [0])
    with pytest.raises(ValueError, match="'elbow'"):
        make_scorer("localization_heads:elbow=knee")
