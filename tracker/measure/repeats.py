"""Repeated inputs (``load.repeat``, tracker/spec/load_repeat.py): the requests a load cycles
through, a share of them repeating earlier ones so that a response cache can hit.

The distinct requests are a pool: the first ``hot`` of them are the ones repeats repeat; the
rest are each sent once per pass. A pass sends every hot request once (the cache's first
misses), then the other distinct requests with repeats of hot ones shuffled among them
(seeded), so that ``pct`` percent of the pass are repeats. The load then cycles through the
pass: a load longer than one pass sends the distinct requests again (a cache large enough
hits them then: the logged ``cache_hit_ratio`` says what the server saw). The pool is at most
:data:`MAX_POOL_BYTES` of tensors, so a large model gets fewer distinct requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from tracker.measure.inputs import Sample, input_specs, random_tensor

if TYPE_CHECKING:
    from tracker.spec.load_repeat import RepeatSection
    from tracker.spec.sections import LoadSection

MAX_POOL_BYTES = 256 * 2**20
T = TypeVar("T")


def _bytes(sample: Sample) -> int:
    return max(1, sum(int(a.nbytes) for a in sample.values()))


def repeat_pool(config: Any, load: LoadSection, samples: list[Sample]) -> list[Sample]:
    """The distinct requests of ``load.repeat`` (``samples`` as they are without it): the
    data file's rows, or random data made until there are ``hot + distinct`` of them, at most
    :data:`MAX_POOL_BYTES`."""
    repeat = load.repeat
    if repeat is None:
        return samples
    wanted = min(repeat.hot + repeat.distinct,
                 max(repeat.hot + 1, MAX_POOL_BYTES // _bytes(samples[0])))
    if load.input_data is not None:
        return samples[:wanted]
    return [*samples, *_random_pool(config, load.batch_size, wanted - len(samples),
                                     repeat.seed + 1)]


def _random_pool(config: Any, batch_size: int, n: int, seed: int) -> list[Sample]:
    """``n`` random requests made at once (as :func:`random_samples` makes one)."""
    if n <= 0:
        return []
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in input_specs(config):
        shape = [batch_size, *spec.dims] if spec.batching else list(spec.dims)
        arrays[spec.name] = random_tensor(spec, [n, *shape], rng)
    return [{name: arr[i] for name, arr in arrays.items()} for i in range(n)]


def repeat_order(n: int, repeat: RepeatSection) -> list[int]:
    """One pass over a pool of ``n`` distinct requests, as indices into it (module text)."""
    hot = min(repeat.hot, max(n - 1, 1))
    fresh = list(range(hot, n))
    share = repeat.pct / 100.0
    repeats = round(share / (1.0 - share) * len(fresh)) if fresh else 0
    rng = np.random.default_rng(repeat.seed)
    kinds = np.array([True] * repeats + [False] * len(fresh), dtype=bool)
    rng.shuffle(kinds)
    picks = iter(rng.integers(0, hot, size=repeats).tolist())
    others = iter(fresh)
    order = list(range(hot))
    order.extend(next(picks) if is_repeat else next(others) for is_repeat in kinds)
    return order


def repeated(payloads: Sequence[T], repeat: RepeatSection | None) -> list[T]:
    """The payloads in the order of one pass (as they are without ``load.repeat``)."""
    if repeat is None:
        return list(payloads)
    return [payloads[i] for i in repeat_order(len(payloads), repeat)]
