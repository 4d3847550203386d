"""The report's figures read at a glance (issue 18): nothing clipped or covered, thresholds apart, k on a
numeric axis, many methods told apart, no bar for a condition that was not run, one colour scale per
overlay. Each test inspects the matplotlib figure a builder drew (captured on its way to PNG), in pixels.
"""

import numpy as np
import pytest

from vrh.report import overlay, plots


@pytest.fixture
def drawn(monkeypatch):
    """Every figure a builder turns into a PNG, in order (the PNG is still made)."""
    figs = []

    def keep(fig):
        figs.append(fig)
        return real(fig)

    real = plots.to_png
    monkeypatch.setattr(plots, "to_png", keep)
    monkeypatch.setattr(overlay, "to_png", keep)
    return figs


def _box(artist, fig):
    return artist.get_window_extent(fig.canvas.get_renderer())


def _inside(artist, fig, tol=1.0):
    b, w, h = _box(artist, fig), fig.bbox.width, fig.bbox.height
    return b.x0 >= -tol and b.y0 >= -tol and b.x1 <= w + tol and b.y1 <= h + tol


LONG_TITLE = "detect: organism_a (llava) on grounding.jsonl (out/sum/mean, n=200), a title longer than the figure"


def test_heatmap_keeps_title_and_labels_in_the_png_and_its_legend_off_the_cells(drawn):
    scores = np.random.default_rng(0).random((4, 8))
    plots.score_heatmap(scores, title=LONG_TITLE, top=[(3, 3), (3, 6), (1, 0)])
    fig = drawn[0]
    ax = fig.axes[0]
    fig.canvas.draw()
    for artist in (ax.title, ax.yaxis.label, ax.xaxis.label, *fig.legends):
        assert _inside(artist, fig), artist
    assert ax.title.get_text().replace("\n", " ") == LONG_TITLE  # wrapped, not shortened
    legends = fig.legends + ([ax.get_legend()] if ax.get_legend() else [])
    assert legends and "top-3" in legends[0].texts[0].get_text()
    assert not any(_box(lg, fig).overlaps(_box(ax.patch, fig)) for lg in legends)  # never on a cell


def test_heatmap_colour_scale_starts_at_0_so_a_flat_map_reads_flat(drawn):
    """From the map's minimum, a flat random map (0.0398-0.0401) looked as concentrated as a planted one
    (issue 46 item 6); scores are shares, so the scale starts at 0."""
    flat = 0.0398 + 0.0003 * np.random.default_rng(0).random((4, 8))
    plots.score_heatmap(flat, title="flat")
    im = drawn[0].axes[0].images[0]
    assert im.norm.vmin == 0 and im.norm.vmax == pytest.approx(flat.max())
    assert "from 0" in drawn[0].axes[1].get_ylabel()  # the colour bar says where it starts
    assert plots.heatmap_range([[-0.5, 2.0]]) == (-0.5, 2.0)  # a negative score: the scale shows it


def test_histogram_threshold_lines_are_far_apart(drawn):
    scores = np.array([[1e-6, 2e-5, 8e-4, 1.3e-3], [6e-3, 0.02, 0.27, 0.8]])
    plots.score_histogram(scores, title="t")  # the page's thresholds: vrh.scoring.sparsity.DEFAULT_THRESHOLDS
    fig = drawn[0]
    ax = fig.axes[0]
    fig.canvas.draw()
    xs = [ax.transData.transform((line.get_xdata()[0], 1))[0] for line in ax.lines]
    assert len(xs) == 2 and abs(xs[1] - xs[0]) > 30  # pixels: 1e-3 and 5e-3 are told apart
    labels = [t.get_text() for lg in fig.legends for t in lg.texts]
    assert any("0.001: 62.5%" in t for t in labels) and any("0.005: 50.0%" in t for t in labels)


def test_k_curve_puts_k_on_a_numeric_axis(drawn):
    plots.k_curve([0, 1, 3, 6], [0.9, 0.5, 0.2, 0.05], [[0.9], [0.9], [0.88], [0.87]], baseline=0.9, title="t")
    ax = drawn[0].axes[0]
    px = [ax.transData.transform((k, 0.5))[0] for k in (0, 1, 3, 6)]
    assert px[3] - px[2] == pytest.approx(3 * (px[1] - px[0]), rel=1e-6)  # true distances, not categories
    assert list(ax.get_xticks()) == [0, 1, 3, 6]
    vrh_line = next(line for line in ax.lines if line.get_label() == "top-k VRHs")
    assert list(vrh_line.get_xdata()) == [0, 1, 3, 6]
    plots.k_curve([0, 1, 3, 5, 10, 20, 50], [0.9] * 7, [[0.9]] * 7, baseline=None, title="t")
    ax = drawn[1].axes[0]
    assert ax.get_xscale() == "symlog" and list(ax.get_xticks()) == [0, 1, 3, 5, 10, 20, 50]


def test_fifteen_methods_differ_in_style_and_identical_curves_share_an_entry(drawn):
    rng = np.random.default_rng(1)
    curves = {f"method {i}": list(rng.random(3)) for i in range(13)}
    curves["twin a"] = curves["twin b"] = [0.5, 0.4, 0.3]
    curves["twin c"] = [0.5, 0.4, 0.3]
    curves["random"] = [0.9, 0.9, 0.88]
    plots.curve_family([5, 10, 20], curves, title="t", highlight="method 0")
    ax = drawn[0].axes[0]
    lines = [line for line in ax.lines if line.get_label() != "unmasked"]
    labels = [line.get_label() for line in lines]
    assert len(lines) == 15 and any(lb.startswith("twin a = twin b = twin c") for lb in labels)
    styles = [(line.get_color(), line.get_linestyle(), line.get_marker()) for line in lines]
    assert len(set(styles)) == len(styles)  # 15 methods past a 10-colour cycle: still all different
    assert lines[labels.index("method 0")].get_color() == plots.VRH_COLOR
    assert lines[labels.index("random")].get_color() == plots.RANDOM_COLOR
    assert list(lines[0].get_xdata()) == [5, 10, 20]


def test_transfer_without_own_heads_has_no_own_bar(drawn):
    res = {"baseline_accuracy": 0.9, "own_heads_accuracy": None, "transferred_heads_accuracy": 0.2,
           "random_accuracy_mean": 0.88}
    plots.transfer_bars(["A → B"], [res], title="t")
    ax = drawn[0].axes[0]
    assert [t.get_text() for t in ax.get_legend().texts] == ["unmasked", "random heads", "transferred VRHs"]
    assert len(ax.containers) == 3
    plots.transfer_bars(["A → B"], [{**res, "own_heads_accuracy": 0.1}], title="t")
    assert "own VRHs" in [t.get_text() for t in drawn[1].axes[0].get_legend().texts]


def test_overlay_panels_each_readable_on_a_stated_scale_with_labels_inside_the_figure(drawn):
    """One shared scale left "all heads" and "all but top-k" blank, and its colour-bar label ran off both ends
    of the figure (issue 37 item 11): each panel now has its own scale, 0 to its peak, its own colour bar,
    and a title that says how its peak compares with the top-k panel's."""
    L, H, V = 2, 4, 16
    att = np.full((L, H, V), 0.01)
    att[1, 2, 5] = att[0, 1, 5] = 1.0  # the two top heads look hard at token 5; the others barely look
    att[0, 0, 9] = 0.1  # one other head looks at token 9 a little
    rects = np.array([[x, y, x + 8, y + 8] for y in range(0, 32, 8) for x in range(0, 32, 8)], dtype=float)
    overlay.attention_overlay(att, rects, [(1, 2), (0, 1)], image=None, gt_box=[8, 8, 16, 16], pred_box=None,
                              title="sample")
    fig = drawn[0]
    fig.canvas.draw()
    panels = {ax.get_title().split("\n")[0]: ax for ax in fig.axes if ax.images}
    for name in ("all heads", "top-2 VRHs"):
        assert panels[name].images[-1].get_array()[..., 3].max() > 0.8, name  # its peak is dark
    rest = panels["all but top-2"].get_title()
    assert "peak 0.025 = 2.5% of the top-2's" in rest, rest  # token 9: (0.1 + 5 * 0.01) / 6 heads
    # its peak is 2.3x its even share (mean 0.0109): scaled to 4x that, so the rest is not drawn near-maximal
    assert 0.4 < panels["all but top-2"].images[-1].get_array()[..., 3].max() < 0.8
    bars = [ax for ax in fig.axes if ax.get_xlabel().startswith("mean attention")]
    assert len(bars) == 3 and sorted(round(b.get_xlim()[1], 5) for b in bars) == [0.04375, 0.2575, 1.0]
    assert all(b.get_xlim()[0] == 0 for b in bars)
    for b in bars:  # the label and every drawn tick label inside the PNG
        box = b.get_tightbbox(fig.canvas.get_renderer())
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, box
        assert _inside(b.xaxis.label, fig), b.get_xlabel()
    sizes = {tuple(np.round(ax.get_position().size, 3)) for ax in fig.axes if ax.get_title()}
    assert len(sizes) == 1  # the input and the three overlays keep one size (no bar takes a panel's space)


def test_a_near_uniform_attention_map_is_drawn_light_on_a_stated_scale(drawn):
    """0..peak drew a map of 0.0399..0.0401 all dark, reading as "maximal everywhere" (issue 46 item 7)."""
    L, H, V = 2, 4, 16
    att = 0.0399 + 0.0002 * np.random.default_rng(0).random((L, H, V))
    rects = np.array([[x, y, x + 8, y + 8] for y in range(0, 32, 8) for x in range(0, 32, 8)], dtype=float)
    overlay.attention_overlay(att, rects, [(1, 2)], image=None, gt_box=None, pred_box=None, title="s")
    fig = drawn[0]
    for ax in (a for a in fig.axes if a.images and a.get_title() != "input"):
        assert ax.images[-1].get_array()[..., 3].max() < 0.35, ax.get_title()  # a quarter of the scale, light
    labels = [ax.get_xlabel() for ax in fig.axes if ax.get_xlabel().startswith("mean attention")]
    assert labels and all("4x its even share" in t for t in labels)


def test_overlay_titles_print_ratios_near_one_as_percents():
    """``:.2g`` printed 99.5-99.99% as ``1e+02%`` (issue 46 item 7)."""
    assert overlay.peak_words("all heads", 0.0995, "top-3 VRHs", 0.1) == "peak 0.0995 = 99.5% of the top-3's"
    assert overlay.peak_words("all heads", 0.09999, "top-3 VRHs", 0.1).endswith(" = 99.99% of the top-3's")
    assert overlay.peak_words("all heads", 0.2, "top-3 VRHs", 0.1) == "peak 0.2 = 2x the top-3's"
    assert "e+" not in overlay.peak_words("all heads", 150.0, "top-3 VRHs", 0.1)


def test_the_share_in_the_gt_box_counts_cells_by_detections_rule(drawn):
    """The overlay counted cells whose centre lies in the box, detection any overlap (issue 46 item 7): one
    rule, :func:`vrh.data.key_cells.cells_in_box`, and the title names it."""
    from vrh.data import key_cells

    V = 16
    att = np.full((1, 2, V), 1.0 / V)
    rects = np.array([[x, y, x + 8, y + 8] for y in range(0, 32, 8) for x in range(0, 32, 8)], dtype=float)
    box = [6, 6, 10, 10]  # overlaps 4 cells, contains no cell's centre
    assert overlay.mass_in_box(att[0, 0], rects, box) == pytest.approx(4 / V)
    assert overlay.mass_in_box(att[0, 0], rects, box, min_overlap=0.5) == 0.0  # 1/16 of each cell inside
    assert overlay.cells_in_box is key_cells.cells_in_box
    overlay.attention_overlay(att, rects, [(0, 1)], image=None, gt_box=box, pred_box=None, title="s")
    titles = [ax.get_title() for ax in drawn[0].axes if ax.images and ax.get_title() != "input"]
    assert titles and all("25% of it on cells overlapping the GT box" in t for t in titles)


def test_overlay_colours_carry_no_object_hue_and_each_panel_states_its_peak(drawn):
    """inferno's purple end read as a purple object of the world (issue 26 item 23): the scale is grey."""
    L, H, V = 2, 4, 16
    att = np.random.default_rng(0).random((L, H, V))
    rects = np.array([[x, y, x + 8, y + 8] for y in range(0, 32, 8) for x in range(0, 32, 8)], dtype=float)
    overlay.attention_overlay(att, rects, [(1, 2)], image=None, gt_box=None, pred_box=None, title="s")
    for ax in (a for a in drawn[0].axes if a.images):
        rgb = np.asarray(ax.images[-1].get_array())[..., :3]
        assert np.allclose(rgb[..., 0], rgb[..., 1]) and np.allclose(rgb[..., 1], rgb[..., 2])
        assert "peak " in ax.get_title()


def test_histogram_of_a_few_heads_has_a_linear_count_axis(drawn):
    """A log count axis from 0.8 made count-1 bars stubs (issue 26 item 23); many heads per bar keep it."""
    few = np.array([[1e-3, 2e-3, 0.1, 0.5], [0.5, 0.5, 0.8, 0.9]])
    plots.score_histogram(few, title="t")
    ax = drawn[0].axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    many = np.concatenate([np.full(200, 1e-3), np.linspace(0.01, 0.9, 40)]).reshape(8, 30)  # [L, H]
    plots.score_histogram(many, title="t")
    ax = drawn[1].axes[0]
    assert ax.get_yscale() == "log" and ax.get_ylim()[0] <= 0.5


def test_curves_that_meet_are_marked_in_the_legend(drawn):
    """A method on the random line at some k hid it there (issue 26 item 23): the later curve says so."""
    curves = {"vera": [0.5, 0.3, 0.1], "ocr_heads": [0.6, 0.3, 0.1], "random": [0.9, 0.88, 0.85],
              "localization_heads": [0.9, 0.7, 0.85]}
    plots.curve_family([1, 3, 6], curves, title="t")
    labels = [line.get_label().replace("\n", " ") for line in drawn[0].axes[0].lines]
    assert any(lb.startswith("ocr_heads") and "on vera at k=3, 6" in lb for lb in labels)
    assert any(lb.startswith("localization_heads") and "on random at k=1, 6" in lb for lb in labels)
    assert next(lb for lb in labels if lb.startswith("vera")) == "vera"


def _detect_with(folder, scores):
    """A finished detection run whose primary score map is ``scores`` ``[L, H]``."""
    from vrh import runs

    L, H = scores.shape
    ranking = [[int(i) // H, int(i) % H] for i in np.argsort(-scores.ravel(), kind="stable")]
    with runs.RunFolder(folder) as run:
        run.write_config({"command": "detect", "detect_ids": ["s0"]})
        runs.write_head_scores(run, runs.HeadScores("out", L, H, 1, {"out": {"scores": scores.tolist(),
                                                                             "ranking": ranking}}))
        run.write_results({"n_scored": 1})
    return folder


@pytest.mark.parametrize("many, count_axis", [(False, "linear"), (True, "logarithmic")])
def test_histogram_caption_says_what_the_plot_drew(tmp_path, drawn, many, count_axis):
    """Every caption said "both axes logarithmic" while the count axis was linear (issue 37 item 1)."""
    from vrh.analyses.reporting import build_sections
    from vrh.report.document import figures
    from vrh.report.load import load_runs

    rng = np.random.default_rng(0)
    scores = (np.concatenate([np.full(400, 1e-3), rng.random(112)]) if many else rng.random(32)).reshape(-1, 8 if not many else 32)
    run = _detect_with(tmp_path / "det", scores)
    fig = next(f for f in figures(build_sections(load_runs([run]), None)) if f.name.endswith("histogram"))
    ax = next(f for f in drawn if f.axes and f.axes[0].get_xlabel().startswith("head score")).axes[0]
    assert ax.get_yscale() == ("log" if many else "linear")
    assert f"score axis logarithmic, count axis {count_axis}" in fig.caption
    assert "both axes" not in fig.caption


def test_stability_band_stays_in_range_and_the_reference_point_stands_apart(drawn):
    """The +-1 std band ran past 100% and was clipped by the axes; the last point (n = the whole detection
    set, the reference itself) ended the curve at 100 +- 0 and read as convergence (issue 37 item 13)."""
    ns, mean, std = [1, 5, 20, 60], [0.3, 0.6, 0.9, 1.0], [0.4, 0.2, 0.15, 0.0]
    plots.stability_curve(ns, mean, std, k=3, title="t", reference_n=60)
    fig = drawn[0]
    ax = fig.axes[0]
    band = ax.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() >= 0 and band[:, 1].max() <= 1  # cut at 0 and 100 %, and the legend says so
    labels = [t.get_text() for lg in fig.legends for t in lg.texts]
    assert any("cut at 0 and 100%" in t for t in labels)
    curve = next(line for line in ax.lines if line.get_label() == "mean overlap")
    assert list(curve.get_xdata()) == [1, 5, 20]  # the curve ends at the last measured n
    ref = next(c for c in ax.collections[1:] if "reference" in c.get_label())
    assert ref.get_offsets().tolist() == [[60, 1.0]] and "100% by definition" in ref.get_label()
    plots.stability_curve(ns, mean, std, k=3, title="t", reference_n=200)  # no n is the whole set: all measured
    assert list(next(line for line in drawn[1].axes[0].lines).get_xdata()) == ns


def test_split_reference_takes_out_only_the_whole_set():
    assert plots.split_reference([1, 4], [0.5, 1.0], 6) == ([1, 4], [0.5, 1.0], [])
    assert plots.split_reference([1, 6], [0.5, 1.0], None) == ([1, 6], [0.5, 1.0], [])


def test_ten_methods_become_small_multiples_with_a_legend_smaller_than_a_panel(drawn, monkeypatch):
    """Ten lines overlapped in one panel and the legend was larger than the plot (issue 46 item 8)."""
    from vrh.report import methods_figure

    rng = np.random.default_rng(1)
    curves = {f"method {i}": list(rng.random(4)) for i in range(9)}
    curves["ours"] = [0.9, 0.5, 0.3, 0.1]
    curves["twin"] = curves["method 3"]
    curves["random"] = [0.9, 0.9, 0.88, 0.86]
    monkeypatch.setattr(methods_figure, "to_png", plots.to_png)  # drawn's recorder
    methods_figure.method_curves([0, 1, 3, 10], curves, title=LONG_TITLE, baseline=0.92, highlight="ours")
    fig = drawn[0]
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.lines]
    assert [ax.get_title() for ax in panels][:1] == ["ours"] and len(panels) == 10  # twins share a panel
    assert "method 3 = twin" in [ax.get_title() for ax in panels]
    assert all(len(ax.lines) <= 4 for ax in panels)  # its curve, the default, random, unmasked
    (legend,) = fig.legends
    area = lambda b: b.width * b.height  # noqa: E731
    assert area(_box(legend, fig)) < area(_box(panels[0].patch, fig))
    assert not any(_box(legend, fig).overlaps(_box(ax.patch, fig)) for ax in panels)
    for artist in (fig._suptitle, legend, *(ax.title for ax in panels)):
        assert _inside(artist, fig), artist
    few = {"ours": [0.9, 0.5], "other": [0.9, 0.8], "random": [0.9, 0.9]}
    methods_figure.method_curves([0, 1], few, title="t", highlight="ours")  # a few methods: still one panel
    assert len([ax for ax in drawn[-1].axes if ax.lines]) == 1


def test_compare_heads_score_maps_start_at_0_too(monkeypatch):
    """compare-heads draws two score heatmaps: on the same scale rule as the report's (issue 46 item 6)."""
    from vrh.report import head_comparison

    drawn = []
    monkeypatch.setattr(head_comparison, "to_png", lambda fig: drawn.append(fig) or b"")
    flat = (0.0398 + 0.0003 * np.random.default_rng(0).random((2, 4))).tolist()
    side = dict(map=flat, kind="vrh", map_kind="score", name="A", ranking=[[0, 1], [1, 2]])
    head_comparison.figure({"a": side, "b": {**side, "name": "B", "kind": "text"}, "overlap": [{"k": 2}]})
    norms = [ax.images[0].norm for ax in drawn[0].axes if ax.images]
    assert [n.vmin for n in norms] == [0, 0] and norms[0].vmax == pytest.approx(max(map(max, flat)))
