"""How many noise draws fit: refuse a sampler request up front, with an estimate.

The exact samplers of :mod:`matmech.privacy.noise` (Canonne, Kamath, Steinke, NeurIPS 2020,
Alg. 2 and 3) hold their output and their working arrays in memory. Asked for 10¹² draws they
used to die inside numpy (``_ArrayMemoryError: Unable to allocate 7.28 TiB``) after reading
the random source; :func:`check_draws` refuses such a request before anything is allocated or
drawn, naming the estimate and the machine's limit (:func:`matmech.validate.memory`).

The estimate is :data:`FIXED_BYTES` plus :data:`BYTES_PER_DRAW` per draw, bounding the peak
traced memory (``tracemalloc``) measured at 10⁵, 10⁶ and 4·10⁶ draws: discrete Laplace
9.3 / 16.4 / 40.4 MB (t = 10⁶: tables of ≈ 8 MB plus 8 bytes a draw); discrete Gaussian,
drawn in blocks of 2¹⁶ (:mod:`matmech.privacy.discrete`), 16.5 / 23.7 / 47.7 MB (σ = 10³;
11.1 / 18.4 / 42.4 at σ = 2.5: ≈ 16 MB of tables and blocks plus 8 bytes a draw); uniform
16 bytes a draw. Not counted: the tables kept across calls in
:data:`matmech.privacy.thresholds.TABLES` (at most 64 MiB, least recently used dropped).
"""

from __future__ import annotations

import math
import numbers

from matmech.validate import SizeError, memory, memory_limit
from matmech.limits import format_bytes


#: Peak bytes per draw of each sampler (output included), rounded up from measurements.
BYTES_PER_DRAW = {"laplace": 16, "gaussian": 16, "uniform": 16}
#: Bytes a sampler may use whatever the number of draws (its tables).
FIXED_BYTES = 32 << 20


def check_draws(n: int, kind: str, *, limit: int | None = None) -> int:
    """``n`` (the number of draws) if ``kind``'s sampler can hold them in memory, else
    :class:`matmech.validate.SizeError` with the estimate; raised before anything is drawn.
    ``limit``: bytes allowed (default :func:`matmech.validate.memory_limit`)."""
    if kind not in BYTES_PER_DRAW:
        raise ValueError(f"kind must be one of {sorted(BYTES_PER_DRAW)}, got {kind!r}")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise TypeError(f"the number of draws must be a non-negative int, got {n!r}")
    per = BYTES_PER_DRAW[kind]
    limit = memory_limit() if limit is None else int(limit)
    need = FIXED_BYTES + int(n) * per
    try:
        memory(need, f"drawing {int(n):,} {kind} noise values ({per} bytes each)", limit=limit)
    except SizeError:
        most = max(limit - FIXED_BYTES, 0) // per
        raise SizeError(
            f"drawing {int(n):,} {kind} noise values needs about {format_bytes(need)} of memory "
            f"({per} bytes per draw), more than the {format_bytes(limit)} allowed; at most about "
            f"{most:,} fit: draw in batches of at most that many"
        ) from None
    return int(n)


def check_shape_draws(shape: tuple, kind: str, *, limit: int | None = None) -> int:
    """:func:`check_draws` for an output ``shape`` (a tuple of non-negative ints)."""
    return check_draws(math.prod(shape), kind, limit=limit)
