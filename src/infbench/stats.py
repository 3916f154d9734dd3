"""Summary statistics over repeated measurements: mean, spread, 95 % confidence intervals."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

# Two-sided 95 % quantiles of Student's t distribution, t_{0.975, df}.
T_975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
    40: 2.021,
    60: 2.000,
    120: 1.980,
}


def t_975(df: int) -> float:
    """t quantile for `df` degrees of freedom; between table rows the next smaller df is used
    (a slightly wider, conservative interval); 1.96 beyond 120."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two samples")
    if df > 120:
        return 1.960
    return T_975[max(key for key in T_975 if key <= df)]


@dataclass
class Summary:
    n: int
    mean: float
    std: float  # sample standard deviation (n - 1)
    ci95_low: float
    ci95_high: float
    median: float
    min: float
    max: float

    def to_json(self) -> dict:
        return asdict(self)


def summarize(values) -> Summary:
    """mean +- t_{0.975, n-1} * s / sqrt(n); with one value the interval is undefined (NaN)."""
    data = np.asarray(list(values), dtype=float)
    if data.size == 0:
        raise ValueError("nothing to summarize")
    mean = float(data.mean())
    if data.size > 1:
        std = float(data.std(ddof=1))
        half = t_975(data.size - 1) * std / math.sqrt(data.size)
    else:
        std, half = math.nan, math.nan
    return Summary(
        int(data.size),
        mean,
        std,
        mean - half,
        mean + half,
        float(np.median(data)),
        float(data.min()),
        float(data.max()),
    )


def ratio_of_means(numerator, denominator) -> dict:
    """Ratio of two independent means with a 95 % CI from the delta method on the log scale:

    r = mean(a) / mean(b)
    se(ln r) = sqrt( s_a^2 / (n_a mean(a)^2) + s_b^2 / (n_b mean(b)^2) )
    CI = r * exp(+- t_{0.975, df} * se(ln r)),  df = min(n_a, n_b) - 1 (conservative)
    """
    a, b = summarize(numerator), summarize(denominator)
    ratio = a.mean / b.mean
    if a.n < 2 or b.n < 2 or a.mean <= 0 or b.mean <= 0:
        return {"ratio": ratio, "ci95_low": math.nan, "ci95_high": math.nan}
    se_log = math.sqrt(a.std**2 / (a.n * a.mean**2) + b.std**2 / (b.n * b.mean**2))
    spread = math.exp(t_975(min(a.n, b.n) - 1) * se_log)
    return {"ratio": ratio, "ci95_low": ratio / spread, "ci95_high": ratio * spread}


def percentile(values, q: float) -> float:
    """Linear-interpolated percentile, as numpy and vLLM's benchmark compute it."""
    data = np.asarray(list(values), dtype=float)
    return float(np.percentile(data, q)) if data.size else math.nan
