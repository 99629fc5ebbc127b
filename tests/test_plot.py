"""matmech.plot: Release and Advice pictures, the command-line comparison figure, and the
message when matplotlib is missing. Figures are written to PNG with the Agg backend."""

import sys

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402

import matmech as mm  # noqa: E402
from matmech import plot as P  # noqa: E402
from matmech import strategies as S  # noqa: E402
from matmech import workloads as W  # noqa: E402
from matmech.advisor.compare import compare  # noqa: E402
from matmech.error import per_query_variance  # noqa: E402

BANDS = [(0, 3), (4, 7), (8, 15), (0, 15)]
LABELS = ["0-3", "4-7", "8-15", "all"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def counts():
    rng = np.random.default_rng(7)
    return mm.histogram(rng.integers(0, 16, 400), 16)


@pytest.fixture(scope="module")
def small_release(counts):
    return mm.release(
        counts, W.ranges(16, BANDS), 1.0, strategy="identity", rng=np.random.default_rng(0)
    )


@pytest.fixture(scope="module")
def advice():
    return mm.advise(W.prefix(16), 1.0, candidates="fixed")


def _saved(fig, path):
    fig.savefig(path, dpi=60)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    return data


def test_plot_release_one_bar_and_error_bar_per_query(small_release, tmp_path):
    ax = P.plot_release(small_release, labels=LABELS)
    assert len(ax.patches) == len(BANDS)
    assert [t.get_text() for t in ax.get_yticklabels()] == LABELS
    widths = sorted(p.get_width() for p in ax.patches)
    np.testing.assert_allclose(widths, np.sort(small_release.answers))
    # one error-bar segment per query, spanning the 95% interval
    segs = [c for c in ax.collections if isinstance(c, LineCollection)][0].get_segments()
    lower, upper = small_release.interval(0.95)
    ends = sorted((s[0][0], s[1][0]) for s in segs)
    np.testing.assert_allclose(ends, sorted(zip(lower, upper)))
    assert "eps = 1" in ax.get_title()
    _saved(ax.figure, tmp_path / "release.png")


def test_plot_release_default_labels_level_and_given_axes(small_release):
    fig, ax = plt.subplots()
    out = P.plot_release(small_release, ax=ax, level=0.9)
    assert out is ax
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"[{a}, {b}]" for a, b in BANDS]
    segs = [c for c in ax.collections if isinstance(c, LineCollection)][0].get_segments()
    lower, upper = small_release.interval(0.9)
    np.testing.assert_allclose(sorted(s[1][0] for s in segs), np.sort(upper))
    assert "90% interval" in ax.get_xlabel()


def test_plot_release_top_and_cap(counts, tmp_path):
    r = mm.release(
        counts, W.all_range(16), 1.0, strategy="hierarchical", rng=np.random.default_rng(1)
    )
    ax = P.plot_release(r, top=5)
    assert len(ax.patches) == 5
    np.testing.assert_allclose(sorted(p.get_width() for p in ax.patches), np.sort(r.answers)[-5:])
    assert "the 5 largest of 136" in ax.get_title()
    ax = P.plot_release(r)  # 136 queries: capped
    assert len(ax.patches) == P.MAX_BARS
    _saved(ax.figure, tmp_path / "top.png")


def test_plot_release_after_selection(tmp_path):
    x = np.array([5, 80, 3, 120, 0, 2, 95, 1, 4, 60, 0, 7, 3, 2, 150, 1])
    names = [f"cell {i}" for i in range(16)]
    r = mm.release(
        x,
        W.identity(16),
        1.0,
        strategy="identity",
        rng=np.random.default_rng(2),
        select=dict(method="svt", threshold=40, c=8, eps=0.5),
    )
    assert r.selected is not None and 0 < r.selected.size < 16
    ax = P.plot_release(r, labels=names)
    assert len(ax.patches) == r.selected.size
    assert [t.get_text() for t in ax.get_yticklabels()] == [names[i] for i in r.selected]
    assert f"{r.selected.size} of 16 rows answered (selected by svt)" in ax.get_title()
    _saved(ax.figure, tmp_path / "selected.png")
    none = mm.release(
        x,
        W.identity(16),
        1.0,
        strategy="identity",
        rng=np.random.default_rng(2),
        select=dict(method="svt", threshold=10_000, c=2, eps=0.5),
    )
    ax = P.plot_release(none)
    assert len(ax.patches) == 0 and any("no row was answered" in t.get_text() for t in ax.texts)


def test_plot_release_rejects_bad_input(small_release):
    with pytest.raises(TypeError, match="expected a Release"):
        P.plot_release({"answers": [1]})
    with pytest.raises(ValueError, match="top must be a positive integer"):
        P.plot_release(small_release, top=0)
    with pytest.raises(ValueError, match="got 2 labels for 4 queries"):
        P.plot_release(small_release, labels=["a", "b"])


def test_plot_advice_bars_and_lower_bound(advice, tmp_path):
    ax = P.plot_advice(advice)
    assert len(ax.patches) == len(advice.rows)
    best = max(ax.patches, key=lambda p: p.get_y())  # bars are drawn bottom-up: best on top
    assert best.get_width() == pytest.approx(advice.rows[0].rmse)
    bound = np.sqrt(advice.lower_bound / advice.queries)
    vlines = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    assert len(vlines) == 1 and vlines[0].get_xdata()[0] == pytest.approx(bound)
    assert all(p.get_width() >= bound * (1 - 1e-9) for p in ax.patches)
    _saved(ax.figure, tmp_path / "advice.png")
    with pytest.raises(TypeError, match="expected an Advice"):
        P.plot_advice(object())


def test_notebook_methods(small_release, advice):
    """Release.plot / Advice.plot are the notebook spellings of plot_release / plot_advice."""
    assert len(small_release.plot().patches) == len(BANDS)
    assert len(advice.plot().patches) == len(advice.rows)


def test_missing_matplotlib_names_the_extra(small_release, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'matmech-dp\[plot\]'"):
        P.plot_release(small_release)
    with pytest.raises(ImportError, match=r"pip install 'matmech-dp\[plot\]'"):
        P.require_matplotlib()


def test_kron_quantiles_match_exact():
    w = W.kron(W.all_range(12), W.prefix(6))
    a = S.kron(S.hierarchical(12, 4), S.identity(6))
    q = np.linspace(0, 1, 21)
    exact = np.quantile(np.sqrt(per_query_variance(w, a, 0.7)), q)
    np.testing.assert_allclose(
        P._kron_quantiles(w, a, 0.7, 0.0, "add_remove", q), exact, rtol=1e-10
    )
    assert P._kron_quantiles(W.all_range(12), S.identity(12), 1.0, 0.0, "add_remove", q) is None


def test_plot_rows_large_workloads(monkeypatch, tmp_path):
    w = W.kron(W.all_range(8), W.all_range(8))
    rows, _ = compare(w, 1.0)
    monkeypatch.setattr(P, "MAX_VARIANCE_ROWS", 100)  # pretend 1,296 queries are too many to list
    fig = P.plot_rows(w, rows, eps=1.0, bound_rmse=mm.lower_bound(w, measure="rmse"))
    left, right = fig.axes[:2]
    assert len(left.patches) == len(rows)
    assert (
        "Kronecker factors" in right.get_title().replace("\n", " ") and len(right.get_lines()) >= 2
    )
    _saved(fig, tmp_path / "kron.png")
    u = W.stack(W.all_range(8), W.total(8))  # no Kronecker structure: a note instead of curves
    rows, _ = compare(u, 1.0)
    monkeypatch.setattr(P, "MAX_VARIANCE_ROWS", 10)
    fig = P.plot_rows(u, rows, eps=1.0)
    assert any("not drawn" in t.get_text() for t in fig.axes[1].texts)


# -- issue 15: the optimiser in `matmech plot`, outliers, the release sample, exact paths ----------

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _cli(capsys, *argv):
    from matmech.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_plot_draws_advise_rows_and_its_best_agrees(capsys, tmp_path):
    """The figure holds advise's rows (the optimiser included) and its green bar is advise's best."""
    spec = ROOT / "workloads" / "age_bands.toml"
    code, out, err = _cli(
        capsys, "plot", str(spec), "--eps", "0.5", "--out", str(tmp_path / "e.png"), "--json"
    )
    assert code == 0, err
    report = __import__("json").loads(out)
    advice = mm.advise(mm.load_spec(spec).workload, 0.5)
    assert report["best"] == advice.rows[0].name
    assert [r["name"] for r in report["ranked"]] == [r.name for r in advice.rows]
    assert any(r.name.startswith("optimized") for r in advice.rows)  # the optimiser is among them
    assert (
        report["wrote"] == str(tmp_path / "e.png")
        and (tmp_path / "e.png").read_bytes()[:4] == b"\x89PNG"
    )
    fig = P.plot_rows(
        advice_w := mm.load_spec(spec).workload,
        advice.rows,
        eps=0.5,
        bound_rmse=advice.lower_bound_rmse,
    )
    bars = fig.axes[0].patches
    top = max(bars, key=lambda p: p.get_y())
    assert top.get_width() == pytest.approx(advice.rows[0].rmse)  # the best bar is never clipped
    assert top.get_facecolor()[:3] == pytest.approx(matplotlib.colors.to_rgb("tab:green"))
    assert (
        fig.axes[0].get_yticklabels()[-1].get_text().startswith(advice.rows[0].name.split(" (")[0])
    )
    assert advice_w.shape[0] == advice.queries


@pytest.mark.parametrize(
    "out, written",
    [
        ("adir/", "adir/age_bands-error.png"),
        ("noext", "noext.png"),
        ("fig.svg", "fig.svg"),
        ("fig.PDF", "fig.PDF"),
    ],
)
def test_cli_plot_writes_exactly_the_path_it_reports(capsys, tmp_path, monkeypatch, out, written):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    code, stdout, err = _cli(
        capsys,
        "plot",
        str(ROOT / "workloads" / "age_bands.toml"),
        "--out",
        out,
        "--time-budget",
        "5",
    )
    assert code == 0, err
    assert stdout.startswith(f"wrote {written} ")
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == [written]  # nothing else, no silent extra suffix
    magic = {"png": b"\x89PNG", "svg": b"<?xml", "pdf": b"%PDF"}[written.rsplit(".", 1)[1].lower()]
    assert (tmp_path / written).read_bytes()[: len(magic)] == magic


def test_cli_plot_refuses_an_unwritable_path_before_ranking(capsys, tmp_path):
    code, _, err = _cli(
        capsys,
        "plot",
        str(ROOT / "workloads" / "age_bands.toml"),
        "--out",
        str(tmp_path / "no" / "x.png"),
    )
    assert code == 2 and "does not exist" in err and not (tmp_path / "no").exists()


class _Row:
    def __init__(self, name, rmse):
        self.name, self.rmse, self.params, self.strategy = name, rmse, {}, None


def test_an_outlier_bar_is_clipped_and_annotated_not_squeezing_the_rest():
    rows = [
        _Row("optimized", 8.06),
        _Row("hierarchical", 8.9),
        _Row("identity", 13.1),
        _Row("workload", 16_408.0),
    ]
    fig, ax = plt.subplots()
    P._rmse_bars(ax, rows, 4.07)
    widths = [p.get_width() for p in ax.patches][::-1]  # drawn bottom-up
    np.testing.assert_allclose(
        widths[:3], [8.06, 8.9, 13.1]
    )  # the useful bars at their true lengths
    edge = 13.1 * 1.25
    assert widths[3] == pytest.approx(edge) and ax.patches[0].get_hatch() == "//"
    assert ax.get_xlim()[1] < 30  # the axis is set by the useful bars, not by 16,408
    assert ax.get_xscale() == "linear"
    assert any(t.get_text() == "16,408 (off scale)" for t in ax.texts)
    assert "clipped" in ax.get_xlabel()
    # no outlier (all within OUTLIER_FACTOR of the best): nothing clipped, every bar exact
    assert P._clip_edge([8.0, 70.0]) is None and P._clip_edge([8.0, 81.0]) == pytest.approx(10.0)
    fig, ax = plt.subplots()
    P._rmse_bars(ax, rows[:3], None)
    assert not any(p.get_hatch() for p in ax.patches) and "clipped" not in ax.get_xlabel()


@pytest.fixture(scope="module")
def many_ranges(counts):
    """5,050 range answers (all ranges over 100 cells): more than MAX_BARS."""
    x = mm.histogram(np.random.default_rng(3).integers(0, 100, 2000), 100)
    return mm.release(
        x, W.all_range(100), 1.0, strategy="hierarchical", rng=np.random.default_rng(4)
    )


def test_release_plot_samples_the_workload_in_its_own_order(many_ranges):
    r = many_ranges
    ax = r.plot()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    want = np.linspace(0, r.answers.size - 1, P.MAX_BARS).round().astype(int)
    lo, hi = r.workload.bounds()
    assert labels == [f"[{lo[i]}, {hi[i]}]" for i in want]
    assert labels[0] == "[0, 0]" and labels[-1] == "[99, 99]"
    np.testing.assert_allclose([p.get_width() for p in ax.patches], r.answers[want])
    assert (
        "evenly spaced in workload order" in ax.get_title()
        and "largest" not in ax.get_title().split("(")[0]
    )
    # not "the 40 largest": near-total ranges do not crowd out short ones
    widths = np.array([p.get_width() for p in ax.patches])
    assert widths.min() < np.sort(r.answers)[-P.MAX_BARS]


def test_release_plot_rows_draws_exactly_the_rows_asked_for(many_ranges):
    r = many_ranges
    asked = [4949, 0, 17, 5049]
    ax = P.plot_release(r, rows=asked)
    np.testing.assert_allclose([p.get_width() for p in ax.patches], r.answers[asked])
    lo, hi = r.workload.bounds()
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"[{lo[i]}, {hi[i]}]" for i in asked]
    for bad, exc, text in [
        ([5050], ValueError, "row 5050"),
        ([1, 1], ValueError, "repeats"),
        ([], ValueError, "at least one"),
        ("12", TypeError, "rows"),
        ([1.0], TypeError, "integer"),
        ([True], TypeError, "integer"),
    ]:
        with pytest.raises(exc, match=text):
            P.plot_release(r, rows=bad)
    with pytest.raises(ValueError, match="not both"):
        P.plot_release(r, rows=[1], top=3)


def test_release_plot_rows_after_a_selection():
    x = np.array([5, 80, 3, 120, 0, 2, 95, 1, 4, 60, 0, 7, 3, 2, 150, 1])
    r = mm.release(
        x,
        W.identity(16),
        1.0,
        strategy="identity",
        rng=np.random.default_rng(2),
        select=dict(method="svt", threshold=40, c=8, eps=0.5),
    )
    asked = [int(r.selected[-1]), 0, int(r.selected[0])]
    ax = P.plot_release(r, rows=asked)
    kept = [w for w in asked if w in set(r.selected.tolist())]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"[{w}, {w}]" for w in kept]
    full = r.full(fill=np.nan)
    np.testing.assert_allclose([p.get_width() for p in ax.patches], full[kept])
    if len(kept) < len(asked):
        assert "were not answered" in ax.get_title()


def test_figure_path_rules(tmp_path):
    (tmp_path / "d").mkdir()
    assert P.figure_path(tmp_path / "d", name="s") == (tmp_path / "d" / "s.png", "png")
    assert P.figure_path(str(tmp_path / "a"), name="s") == (tmp_path / "a.png", "png")
    assert P.figure_path(tmp_path / "a.tar", name="s") == (tmp_path / "a.tar.png", "png")
    assert P.figure_path(tmp_path / "a.SVG") == (tmp_path / "a.SVG", "svg")
    with pytest.raises(TypeError, match="out must be"):
        P.figure_path(3)


# -- issue 23: colours agree between panels, titles fit, no RMSE bound against per-query std, ----
# -- error bars visible next to large counts ---------------------------------------------------


def _inside_figure(fig, artist):
    fig.canvas.draw()
    box = artist.get_window_extent(fig.canvas.get_renderer())
    W_, H_ = fig.canvas.get_width_height()
    return box.x0 >= -1 and box.x1 <= W_ + 1 and box.y1 <= H_ + 1


def test_plot_rows_colours_agree_titles_fit_and_no_bound_against_per_query_std(tmp_path):
    w = W.prefix(64)
    rows, _ = compare(w, 1.0)
    fig = P.plot_rows(
        w, rows, eps=1.0, bound_rmse=mm.lower_bound(w, measure="rmse"), title="a long title " * 12
    )
    left, right = fig.axes[:2]
    bar_colour = {
        t.get_text(): p.get_facecolor()[:3] for t, p in zip(left.get_yticklabels(), left.patches)
    }
    for line in right.get_lines():
        name = line.get_label()
        match = [c for label, c in bar_colour.items() if label.startswith(name)]
        assert match and matplotlib.colors.to_rgb(line.get_color()) == pytest.approx(match[0]), name
    assert not [
        ln for ln in right.get_lines() if ln.get_linestyle() == "--"
    ]  # the bound is on the left only
    assert [ln for ln in left.get_lines() if ln.get_linestyle() == "--"]
    for title in (fig._suptitle, left.title, right.title):
        assert _inside_figure(fig, title), title.get_text()
    _saved(fig, tmp_path / "rows.png")


def test_release_plot_shows_the_error_on_its_own_scale_next_to_large_counts(tmp_path):
    x = np.array([50_000, 48_000, 120, 3, 2, 60_000, 1, 0] * 4)
    rel = mm.release(
        x,
        W.ranges(32, [(0, 3), (4, 7), (0, 31), (8, 8)]),
        1.0,
        strategy="hierarchical",
        rng=np.random.default_rng(1),
        domain=32,
    )
    ax = P.plot_release(
        rel, labels=["dep_delay -60 to -57", "b", "a rather long label for the total of all", "d"]
    )
    wide = [a for a in ax.figure.axes if a is not ax][0]
    lower, upper = rel.interval(0.95)
    np.testing.assert_allclose([p.get_width() for p in wide.patches], (upper - lower) / 2)
    assert (
        max(p.get_width() for p in wide.patches) > 0.5 * wide.get_xlim()[1]
    )  # visibly long on its own scale
    assert _inside_figure(ax.figure, ax.title)
    _saved(ax.figure, tmp_path / "release_large.png")
