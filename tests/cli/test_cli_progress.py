"""The progress bar of the long ``matmech`` steps (matmech.cli.progress, issue 32): drawn when
forced on or when stderr is a terminal, absent when it is not, and made of stage names and
fractions only (never a count or any other value of the data)."""

import io
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from matmech.cli import main, progress
from matmech.cli.release import STAGES

import cli_cases
from cli_cases import release_args

files = cli_cases.files  # the fixture, bound by name


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _visible(text):
    """What a terminal shows last on the bar's line (tqdm redraws after each ``\\r``)."""
    return [part.strip() for part in text.split("\r") if part.strip()]


@pytest.fixture
def no_delay(monkeypatch):
    """Bars draw at once (the default waits DELAY seconds so quick runs print nothing)."""
    monkeypatch.setattr(progress, "DELAY", 0.0)


def test_a_bar_shows_its_stage_and_fraction_and_erases_its_line():
    s = io.StringIO()
    with progress.Progress(True, stream=s, delay=0.0) as bar:
        bar(0.5, "optimising")
        bar(1.0, "done")
    shown = _visible(s.getvalue())
    assert shown[0].startswith("optimising:  50%|") and shown[1].startswith("done: 100%|")
    assert s.getvalue().endswith("\r"), "closed: the line is blanked, the cursor at its start"
    assert bar._bar is None and bar not in progress._OPEN


def test_a_bar_waits_its_delay_and_a_disabled_bar_writes_nothing():
    quiet = io.StringIO()
    with progress.Progress(True, stream=quiet, delay=60.0) as bar:
        bar(0.5, "x")
    assert quiet.getvalue() == ""
    off = io.StringIO()
    with progress.Progress(False, stream=off, delay=0.0) as bar:
        bar(0.5, "x")
        assert bar._ticker is None  # no thread, no tqdm
    assert off.getvalue() == ""


def test_a_stage_without_calls_is_redrawn_while_it_runs():
    s = io.StringIO()
    with progress.Progress(True, stream=s, delay=0.0, tick=0.01) as bar:
        bar.stage(("reading", "measuring"), 1)
        time.sleep(0.2)
    shown = _visible(s.getvalue())
    assert len(shown) >= 3 and all(line.startswith("measuring:  50%|") for line in shown)


def test_auto_draws_only_on_a_terminal():
    for mode, stream, on in [
        ("auto", io.StringIO(), False),
        ("auto", _Terminal(), True),
        ("always", io.StringIO(), True),
        ("never", _Terminal(), False),
    ]:
        with progress.progress(SimpleNamespace(progress=mode), stream=stream) as bar:
            assert bar.enabled is on, (mode, type(stream).__name__)
    with pytest.raises(ValueError, match="--progress must be one of auto, always, never"):
        progress.progress(SimpleNamespace(progress="sometimes"))


def test_release_progress_is_stage_names_and_fractions_only(files, no_delay, capsys):
    """Forced on: every stage of a release is named on stderr; once the stage names, the
    percentages and the elapsed time are taken out, no digit is left (no count, total or
    other value of the data can be in it)."""
    d, data, truth, _ = files
    code = main(
        release_args(d, data, "--eps", "1", "--out", str(d / "a.csv"), "--progress", "always")
    )
    err = capsys.readouterr().err
    assert code == 0, err
    shown = _visible(err)
    assert [s for s in STAGES if any(line.startswith(s + ":") for line in shown)] == list(STAGES)
    rest = err
    for stage in STAGES:
        rest = rest.replace(stage, "")
    rest = re.sub(r"\d{1,3}%", "", rest)
    rest = re.sub(r"\d\d:\d\d", "", rest)
    assert not re.search(r"\d", rest), rest
    assert str(truth.max()) not in err  # the check has something to find: the counts are big
    assert truth.max() >= 1000


def test_release_prints_no_bar_when_stderr_is_not_a_terminal(files, no_delay, capsys):
    """The default (auto) with stderr captured (not a terminal): nothing on stderr, even with
    no delay (``advise``: test_cli_advise.py, in a subprocess)."""
    d, data, _, _ = files
    assert main(release_args(d, data, "--eps", "1", "--out", str(d / "a.csv"))) == 0
    assert capsys.readouterr().err == ""


def test_advise_draws_its_own_progress_when_forced(files, no_delay, capsys):
    d, _, _, _ = files
    assert main(["advise", str(d / "bands.toml"), "--eps", "1", "--progress", "always"]) == 0
    captured = capsys.readouterr()
    shown = _visible(captured.err)
    assert shown and all(re.search(r": +\d{1,3}%\|", line) for line in shown)
    assert captured.out.startswith("bands: ")  # the table, on stdout, after the bar's line


def test_stream_init_draws_a_bar_when_forced(tmp_path, no_delay, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text(
        'horizon = 16\ncategories = ["a", "b"]\neps = 1.0\nfactorization = "identity"\n'
    )
    db = tmp_path / "s.db"
    assert main(["stream", "init", str(spec), str(db), "--progress", "always"]) == 0
    captured = capsys.readouterr()
    assert _visible(captured.err)[0].startswith("planning the stream and creating its file:   0%|")
    assert captured.out.startswith(f"created stream {db}")
    assert main(["stream", "init", str(spec), str(tmp_path / "t.db")]) == 0
    assert capsys.readouterr().err == ""  # auto, stderr not a terminal


def test_an_error_ends_the_bar_before_its_message(files, no_delay, capsys):
    d, data, _, _ = files
    argv = release_args(d, data, "--eps", "1", "--out", str(d / "a.csv"), "--progress", "always")
    assert main([*argv, "--strategy", "no-such-strategy"]) == 2
    err = capsys.readouterr().err
    assert _visible(err)[0].startswith("checking the inputs:   0%|")
    last = err.split("\r")[-1]
    assert last.startswith("matmech: error: --strategy must be one of") and last.endswith("\n")
    assert progress._OPEN == []


def test_tqdm_is_imported_only_when_a_bar_is_drawn():
    code = (
        "import sys; from matmech.cli.progress import Progress\n"
        "with Progress(False) as bar: bar(0.5, 'x')\n"
        "print('tqdm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
