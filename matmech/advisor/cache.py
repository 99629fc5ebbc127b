"""A small cache of ``strategy="auto"`` choices, keyed on a fingerprint of the workload.

Choosing a strategy reads only (W, ε, δ, neighbours), never data, so the choice can be kept
and reused: a second release of the same workload does not re-run the advisor (≈ 2 s on
2-way marginals over 2,916 cells). The key is a SHA-256 over the operator's registered
description (``LinOp.to_dict``, the form :func:`matmech.save_strategy` writes:
:func:`matmech.linalg.storage.fingerprint`) and its arrays;
operators without one are not cached. Least recently used entries go first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from matmech.linalg.linop import LinOp
from matmech.linalg.storage import fingerprint


#: Choices kept (least recently used first out).
MAX_ENTRIES = 32
_CACHE: OrderedDict = OrderedDict()


def cached_choice(
    W: LinOp,
    eps: float,
    delta: float,
    neighbors: str,
    choose: Callable[[], Any],
    *,
    extra: tuple = (),
) -> Any:
    """``choose()`` for (W, ε, δ, neighbours, ``extra``), computed once and then reused."""
    fp = fingerprint(W)
    if fp is None:
        return choose()
    key = (fp, float(eps), float(delta), str(neighbors), *extra)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    out = choose()
    _CACHE[key] = out
    while len(_CACHE) > MAX_ENTRIES:
        _CACHE.popitem(last=False)
    return out


def clear() -> None:
    """Forget every cached choice."""
    _CACHE.clear()
