"""Streaming per-column moments and exact-to-resolution percentiles (pure numpy, mergeable).

`RunningMoments` keeps count / mean / M2 / min / max per column in float64 and merges blocks with
Chan et al.'s parallel update (Welford's algorithm generalised to blocks), so a store is
summarised block by block (or worker by worker) with the accuracy of a two-pass computation.
`HistogramQuantiles` finds percentiles in two histogram passes over the same stream (coarse bins
over [min, max], then fine bins inside the bins that hold the wanted ranks, with the exact
minimum and maximum of each fine bin): exact where a fine bin holds equal values (duplicates),
else within (max - min) / (coarse x fine) of the true order statistic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["HistogramQuantiles", "RunningMoments", "as_rows"]


def as_rows(block: np.ndarray) -> np.ndarray:
    """float64 [rows, columns] view of a [rows, *shape] block (empty blocks included)."""
    a = np.asarray(block, np.float64)
    return a.reshape(a.shape[0], int(np.prod(a.shape[1:], dtype=np.int64)))


class RunningMoments:
    """Count, mean, variance, min and max per column of a stream of [rows, C] blocks.
    Non-finite values are left out and counted in `nonfinite`."""

    def __init__(self, columns: int) -> None:
        c = int(columns)
        self.count = np.zeros(c, np.int64)
        self.mean = np.zeros(c, np.float64)
        self.m2 = np.zeros(c, np.float64)
        self.min = np.full(c, np.inf)
        self.max = np.full(c, -np.inf)
        self.nonfinite = np.zeros(c, np.int64)

    def update(self, block: np.ndarray) -> None:
        x = as_rows(block)
        if x.shape[0] == 0:
            return
        finite = np.isfinite(x)
        if finite.all():
            nb = np.full(x.shape[1], x.shape[0], np.int64)
            mb = x.mean(axis=0)
            m2b = ((x - mb) ** 2).sum(axis=0)
            lo, hi = x.min(axis=0), x.max(axis=0)
        else:
            nb = finite.sum(axis=0)
            self.nonfinite += x.shape[0] - nb
            xz = np.where(finite, x, 0.0)
            mb = xz.sum(axis=0) / np.maximum(nb, 1)
            m2b = (np.where(finite, x - mb, 0.0) ** 2).sum(axis=0)
            lo = np.where(finite, x, np.inf).min(axis=0)
            hi = np.where(finite, x, -np.inf).max(axis=0)
        self.merge_parts(nb, mb, m2b, lo, hi)

    def merge_parts(
        self, nb: np.ndarray, mb: np.ndarray, m2b: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> None:
        """Chan's parallel merge of (count, mean, M2, min, max) of another part."""
        na = self.count
        n = na + nb
        safe = np.maximum(n, 1)
        delta = mb - self.mean
        self.mean = np.where(n > 0, self.mean + delta * nb / safe, 0.0)
        self.m2 = self.m2 + m2b + delta**2 * na * nb / safe
        self.count = n
        self.min = np.minimum(self.min, lo)
        self.max = np.maximum(self.max, hi)

    def merge(self, other: RunningMoments) -> None:
        self.merge_parts(other.count, other.mean, other.m2, other.min, other.max)
        self.nonfinite = self.nonfinite + other.nonfinite

    @property
    def var(self) -> np.ndarray:
        """Population variance (ddof=0)."""
        return np.where(self.count > 0, self.m2 / np.maximum(self.count, 1), np.nan)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var)


class HistogramQuantiles:
    """Two-pass percentiles per column given the exact count/min/max of each column.

    Feed every block to `coarse(block)`, call `prepare()`, feed every block again to
    `fine(block)`, then `result()` -> {q: values[C]} (numpy's "linear" interpolation)."""

    def __init__(
        self,
        count: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        percentiles: Sequence[float],
        *,
        coarse_bins: int = 2048,
        fine_bins: int = 4096,
    ) -> None:
        self.n, self.lo, self.hi = np.asarray(count), np.asarray(lo, float), np.asarray(hi, float)
        self.q = [float(p) for p in percentiles]
        self.B, self.F = coarse_bins, fine_bins
        c = len(self.n)
        self.width = np.where(self.hi > self.lo, (self.hi - self.lo) / self.B, 1.0)
        self.counts = np.zeros((c, self.B), np.int64)
        # ranks wanted per column: floor and ceil of q/100 * (n - 1)
        r = np.array(self.q)[None, :] / 100.0 * np.maximum(self.n - 1, 0)[:, None]
        self.k_lo, self.k_hi = np.floor(r).astype(np.int64), np.ceil(r).astype(np.int64)
        self.frac = r - self.k_lo

    def _bins(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        finite = np.isfinite(x)
        idx = np.floor((np.where(finite, x, self.lo) - self.lo) / self.width).astype(np.int64)
        return np.clip(idx, 0, self.B - 1), finite

    def coarse(self, block: np.ndarray) -> None:
        x = as_rows(block)
        idx, finite = self._bins(x)
        flat = (idx + np.arange(x.shape[1]) * self.B)[finite]
        self.counts += np.bincount(flat, minlength=self.counts.size).reshape(self.counts.shape)

    def prepare(self) -> None:
        """Locate the coarse bin and the rank inside it of every wanted order statistic."""
        cum = np.cumsum(self.counts, axis=1)
        c = len(self.n)
        self.targets: list[np.ndarray] = []
        self.where: list[dict[int, tuple[int, int]]] = []  # rank -> (coarse bin, rank in bin)
        for j in range(c):
            ranks = np.unique(np.concatenate([self.k_lo[j], self.k_hi[j]]))
            b = np.searchsorted(cum[j], ranks, side="right")
            b = np.minimum(b, self.B - 1)
            before = np.where(b > 0, cum[j][b - 1], 0)
            self.where.append(
                {int(k): (int(bb), int(k - bf)) for k, bb, bf in zip(ranks, b, before, strict=True)}
            )
            self.targets.append(np.unique(b))
        t = max((len(t) for t in self.targets), default=0)
        shape = (c, max(t, 1), self.F)
        self.fcount = np.zeros(shape, np.int64)
        self.fmin = np.full(shape, np.inf)
        self.fmax = np.full(shape, -np.inf)

    def fine(self, block: np.ndarray) -> None:
        x = as_rows(block)
        idx, finite = self._bins(x)
        for j, targets in enumerate(self.targets):
            sel = finite[:, j] & np.isin(idx[:, j], targets)
            if not sel.any():
                continue
            v, b = x[sel, j], idx[sel, j]
            slot = np.searchsorted(targets, b)
            left = self.lo[j] + b * self.width[j]
            f = np.clip(((v - left) / self.width[j] * self.F).astype(np.int64), 0, self.F - 1)
            flat = slot * self.F + f
            self.fcount[j].reshape(-1)[:] += np.bincount(flat, minlength=self.fcount[j].size)
            np.minimum.at(self.fmin[j].reshape(-1), flat, v)
            np.maximum.at(self.fmax[j].reshape(-1), flat, v)

    def _value(self, j: int, k: int) -> float:
        b, r = self.where[j][k]
        slot = int(np.searchsorted(self.targets[j], b))
        cum = np.cumsum(self.fcount[j, slot])
        f = min(int(np.searchsorted(cum, r, side="right")), self.F - 1)
        lo_v, hi_v = self.fmin[j, slot, f], self.fmax[j, slot, f]
        if not np.isfinite(lo_v):
            return float(self.lo[j] + (b + (f + 0.5) / self.F) * self.width[j])
        if lo_v == hi_v:
            return float(lo_v)
        inside = cum[f] - (cum[f - 1] if f else 0)
        pos = (r - (cum[f - 1] if f else 0) + 0.5) / max(inside, 1)
        return float(lo_v + pos * (hi_v - lo_v))

    def result(self) -> dict[float, np.ndarray]:
        out: dict[float, np.ndarray] = {}
        for i, q in enumerate(self.q):
            vals = []
            for j in range(len(self.n)):
                if self.n[j] == 0:
                    vals.append(np.nan)
                    continue
                a = self._value(j, int(self.k_lo[j, i]))
                b = self._value(j, int(self.k_hi[j, i]))
                vals.append(a + self.frac[j, i] * (b - a))
            out[q] = np.asarray(vals)
        return out
