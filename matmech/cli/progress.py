"""The progress bar of the long ``matmech`` steps (``release``, ``advise``, ``plot``, ``stream
init``), drawn on stderr by tqdm.

A bar is a callable(fraction, message), the form of the library's ``progress=`` hooks
(:func:`matmech.advisor.advise.advise`), so it is handed to them as is; a command without
such a hook calls it at the start of each of its stages. It shows a stage name, the fraction
done and the time spent, nothing else: the messages are fixed stage names or come from the
data-independent planning, never a count, a total or any other value of the data.

``--progress auto`` (the default) draws only when stderr is a terminal, so a redirected or
piped run prints nothing extra; ``always`` and ``never`` force it. A bar appears only once
its step has run for :data:`DELAY` seconds (quick runs print nothing), is redrawn every
:data:`TICK` seconds while a stage without a hook runs, and erases its line when closed
(also before an error message, :func:`close_all`).
"""

from __future__ import annotations

import sys
import threading
import time


#: The ``--progress`` choices.
MODES = ("auto", "always", "never")

#: Seconds a step runs before its bar appears, and between redraws of a waiting bar.
DELAY, TICK = 0.5, 0.5

#: Resolution of the bar (tqdm counts in these steps).
_STEPS = 1000

_OPEN: list = []  # bars not yet closed, for close_all


def progress_arg(p):
    """The ``--progress`` option of a long step."""
    p.add_argument(
        "--progress",
        choices=MODES,
        default="auto",
        help="progress bar on stderr (stage and fraction done): auto = only when stderr is "
        "a terminal (default), always, never",
    )


class Progress:
    """A callable(fraction, message) drawing one tqdm bar on ``stream`` (default stderr).

    ``enabled`` False: every call does nothing and tqdm is not imported. Use as a context
    manager or call :meth:`close`. ``delay``, ``tick``: default :data:`DELAY`, :data:`TICK`.
    """

    def __init__(self, enabled, *, stream=None, delay=None, tick=None):
        self.enabled = bool(enabled)
        self.delay = DELAY if delay is None else delay
        self.tick = TICK if tick is None else tick
        self.stream = sys.stderr if stream is None else stream
        self.start = time.perf_counter()
        self.fraction, self.message = 0.0, ""
        self._bar = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = None
        if self.enabled:
            _OPEN.append(self)
            self._ticker = threading.Thread(target=self._tick, name="matmech-progress", daemon=True)
            self._ticker.start()

    def __call__(self, fraction, message):
        if not self.enabled:
            return
        self.fraction = min(max(float(fraction), 0.0), 1.0)
        self.message = str(message)
        self._draw()

    def stage(self, stages, i):
        """Stage ``i`` of the fixed stage names ``stages`` begins: its name, at the fraction
        of stages done."""
        self(i / len(stages), stages[i])

    def _tick(self):
        while not self._stop.wait(self.tick):
            self._draw()

    def _draw(self):
        if time.perf_counter() - self.start < self.delay:
            return
        with self._lock:
            if self._stop.is_set():
                return
            n, desc = round(_STEPS * self.fraction), self.message[:60]
            if self._bar is None:  # drawn as it is made
                from tqdm import tqdm

                self._bar = tqdm(
                    total=_STEPS,
                    initial=n,
                    desc=desc,
                    file=self.stream,
                    leave=False,
                    dynamic_ncols=True,
                    bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}",
                )
                return
            self._bar.n = n
            self._bar.set_description_str(desc, refresh=False)
            self._bar.refresh()

    def close(self):
        """Stop redrawing and erase the bar's line (idempotent)."""
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join()
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
        if self in _OPEN:
            _OPEN.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress(args, *, stream=None):
    """The bar of a command from its ``--progress`` option (``auto``: ``stream``, default
    stderr, is a terminal)."""
    stream = sys.stderr if stream is None else stream
    mode = getattr(args, "progress", "auto")
    if mode not in MODES:
        raise ValueError(f"--progress must be one of {', '.join(MODES)}, got {mode!r}")
    isatty = getattr(stream, "isatty", None)
    enabled = mode == "always" or (mode == "auto" and isatty is not None and isatty())
    return Progress(enabled, stream=stream)


def close_all():
    """Close every open bar (before an error message is printed, and when a command ends)."""
    for bar in list(_OPEN):
        bar.close()
