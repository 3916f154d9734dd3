"""Summary statistics over repeated measurements: mean, spread, 95 % confidence intervals."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


def t_two_sided_coverage(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer `df` degrees of freedom, in closed form
    (Abramowitz & Stegun 26.7.3-4), with theta = atan(t / sqrt(df)):

    df odd:  (2 / pi) * (theta + sin(theta) cos(theta) * sum_k prod_{j<=k} (2j) / (2j + 1) cos^(2k)(theta)),
             k = 0 .. (df - 3) / 2 (the sum is empty for df = 1)
    df even: sin(theta) * sum_k prod_{j<=k} (2j - 1) / (2j) cos^(2k)(theta),  k = 0 .. (df - 2) / 2
    """
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    term, series = 1.0, 1.0
    if df % 2:
        if df == 1:
            return 2 * theta / math.pi
        for j in range(1, (df - 3) // 2 + 1):
            term *= cos2 * (2 * j) / (2 * j + 1)
            series += term
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * series)
    for j in range(1, (df - 2) // 2 + 1):
        term *= cos2 * (2 * j - 1) / (2 * j)
        series += term
    return math.sin(theta) * series


def t_975(df: int) -> float:
    """The two-sided 95 % critical value t_{0.975, df} of Student's t: t_upper(0.025, df)."""
    return t_upper(0.025, df)


def t_upper(alpha: float, df: int) -> float:
    """The t with P(T >= t) = alpha (0 < alpha < 0.5) for Student's t: the t at which
    P(|T| <= t) = 1 - 2 alpha, found by bisection on the closed-form distribution (exact to 1e-9)."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two samples")
    # Beyond 10,000 degrees of freedom the value there is kept: t_{0.975} is then 1.9602, at most
    # 2.4e-4 above the normal's 1.95996, so a slightly wider interval, and the series stays short.
    df = min(df, 10_000)
    low, high = 0.0, 13.0  # t_{0.975, 1} = 12.706
    while t_two_sided_coverage(high, df) < 1 - 2 * alpha:
        high *= 2
    while high - low > 1e-10:
        middle = (low + high) / 2
        low, high = (middle, high) if t_two_sided_coverage(middle, df) < 1 - 2 * alpha else (low, middle)
    return (low + high) / 2


def t_test_power(shift: float, critical: float, df: int) -> float:
    """The chance that a one-sided t-test with `df` degrees of freedom reaches `critical` when its
    statistic's mean is `shift` standard errors past the null, from the noncentral t:

    power = P((Z + shift) / sqrt(V / df) >= critical),  Z ~ N(0, 1), V ~ chi-square(df)
          = integral over u = sqrt(V) of g(u) * (1 - Phi(critical * u / sqrt(df) - shift)) du,
    g(u) = 2 u^(df - 1) exp(-u^2 / 2) / (2^(df / 2) Gamma(df / 2))   (the density of sqrt(V)),

    by the trapezoid rule on 4,001 points out to sqrt(df) + 12 (the rest of g's mass is below 1e-30)."""
    u = np.linspace(0.0, math.sqrt(df) + 12.0, 4001)
    log_norm = math.log(2.0) - (df / 2) * math.log(2.0) - math.lgamma(df / 2)
    density = np.empty_like(u)
    density[0] = math.exp(log_norm) if df == 1 else 0.0
    density[1:] = np.exp(log_norm + (df - 1) * np.log(u[1:]) - u[1:] ** 2 / 2)
    z = critical * u / math.sqrt(df) - shift
    reach = 0.5 * np.vectorize(math.erfc)(z / math.sqrt(2.0))
    return float(np.trapezoid(density * reach, u))


def shift_for_power(power: float, critical: float, df: int) -> float:
    """The shift (in standard errors) at which t_test_power reaches `power`: bisection."""
    if not 0 < power < 1 or df < 1:
        raise ValueError(f"power {power} must lie strictly between 0 and 1 and df {df} be at least 1")
    low, high = 0.0, 1.0
    while t_test_power(high, critical, df) < power:
        low, high = high, high * 2
    while high - low > 1e-6:
        middle = (low + high) / 2
        low, high = (middle, high) if t_test_power(middle, critical, df) < power else (low, middle)
    return (low + high) / 2


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


def log_ratio(numerator, denominator) -> tuple[float, float, int] | None:
    """The ratio of two independent means and the standard error of its logarithm (delta
    method), with the degrees of freedom its interval uses:

    r = mean(a) / mean(b)
    v_a = s_a^2 / (n_a mean(a)^2),  v_b = s_b^2 / (n_b mean(b)^2)
    se(ln r) = sqrt(v_a + v_b)
    df = floor( (v_a + v_b)^2 / (v_a^2 / (n_a - 1) + v_b^2 / (n_b - 1)) )   (Welch-Satterthwaite,
         rounded down; between min(n_a, n_b) - 1 and n_a + n_b - 2; the latter when both spreads are 0)

    None where either side has one sample or a mean that is not positive."""
    a, b = summarize(numerator), summarize(denominator)
    if a.n < 2 or b.n < 2 or a.mean <= 0 or b.mean <= 0:
        return None
    v_a, v_b = a.std**2 / (a.n * a.mean**2), b.std**2 / (b.n * b.mean**2)
    pooled_df = a.n + b.n - 2
    welch = (v_a + v_b) ** 2 / (v_a**2 / (a.n - 1) + v_b**2 / (b.n - 1)) if v_a + v_b > 0 else pooled_df
    # The floor guards against rounding just under an integer (e.g. 1.9999999 for 2).
    df = min(pooled_df, max(min(a.n, b.n) - 1, math.floor(welch + 1e-9)))
    return a.mean / b.mean, math.sqrt(v_a + v_b), df


def ratio_of_means(numerator, denominator) -> dict:
    """Ratio of two independent means with a 95 % CI on the log scale (log_ratio):
    CI = r * exp(+- t_{0.975, df} * se(ln r))."""
    fitted = log_ratio(numerator, denominator)
    if fitted is None:  # one sample, or a mean that is not positive: no interval (nor a ratio at b = 0)
        a, b = summarize(numerator), summarize(denominator)
        return {"ratio": a.mean / b.mean if b.mean > 0 else math.nan, "ci95_low": math.nan, "ci95_high": math.nan}
    ratio, se_log, df = fitted
    spread = math.exp(t_975(df) * se_log)
    return {"ratio": ratio, "ci95_low": ratio / spread, "ci95_high": ratio * spread}


def upper_tail(t: float, df: int) -> float:
    """P(T >= t) for Student's t with `df` degrees of freedom (one-sided p-value of t)."""
    tail = (1 - t_two_sided_coverage(abs(t), df)) / 2
    return tail if t >= 0 else 1 - tail


def paired_log_ratio(numerator, denominator) -> tuple[float, float, int] | None:
    """Paired measurements' ratio and the standard error of its logarithm, with the degrees of
    freedom its interval uses: d_i = ln(a_i / b_i), r = exp(mean(d)), se(ln r) = sd(d) / sqrt(n),
    df = n - 1. None with one pair or a value not above zero."""
    if len(numerator) < 2 or min([*numerator, *denominator]) <= 0:
        return None
    logs = summarize([math.log(a / b) for a, b in zip(numerator, denominator, strict=True)])
    return math.exp(logs.mean), logs.std / math.sqrt(logs.n), logs.n - 1


def p_slower(ratio: float, se_log: float, df: int, better: str, threshold: float) -> float:
    """How surprising a candidate / baseline `ratio` is if the candidate is no slower than the
    threshold band: with the gain g = ratio (1 / ratio where lower is better),

    t = (ln(1 / (1 + threshold)) - ln g) / se(ln g),   p = P(T >= t) with `df` degrees of freedom.

    p < 0.025 exactly when the 95 % interval of g lies wholly below 1 / (1 + threshold)."""
    gain = ratio if better == "higher" else 1 / ratio
    if se_log == 0:
        return 0.0 if gain < 1 / (1 + threshold) else 1.0
    return upper_tail((-math.log(1 + threshold) - math.log(gain)) / se_log, df)


def paired_ratio(numerator, denominator) -> dict:
    """Ratio of paired measurements (a_i, b_i taken side by side) with a 95 % CI on the log
    scale, so that drift both members of a pair share cancels:

    d_i = ln(a_i / b_i),  r = exp(mean(d))  (the geometric mean of the per-pair ratios)
    CI = exp(mean(d) +- t_{0.975, n-1} * sd(d) / sqrt(n))
    """
    logs = [math.log(a / b) for a, b in zip(numerator, denominator, strict=True)]
    summary = summarize(logs)
    return {
        "ratio": math.exp(summary.mean),
        "ci95_low": math.exp(summary.ci95_low),
        "ci95_high": math.exp(summary.ci95_high),
    }


def percentile(values, q: float) -> float:
    """Linear-interpolated percentile, as numpy and vLLM's benchmark compute it."""
    data = np.asarray(list(values), dtype=float)
    return float(np.percentile(data, q)) if data.size else math.nan


def median_interval(values, confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free interval for the median from order statistics: the j-th smallest and
    j-th largest of n values, with j the largest index such that

    P(x_(j) <= median <= x_(n-j+1)) = 1 - 2 * P(Binomial(n, 1/2) < j) >= confidence.

    None when n is too small for that coverage (n < 6 at 95 %)."""
    data = np.sort(np.asarray(list(values), dtype=float))
    n = data.size
    below, j = 0.0, 0  # below = P(Binomial(n, 1/2) < j + 1)
    while True:
        below += math.comb(n, j) / 2**n
        if 1 - 2 * below < confidence:
            break
        j += 1
    if j == 0:
        return None
    return float(data[j - 1]), float(data[n - j])


def percentile_needs(q: float) -> int:
    """Smallest sample whose pXX has at least one value above it in expectation:
    n * (1 - q / 100) >= 1, so p50 needs 2, p90 10, p95 20, p99 100."""
    return math.ceil(100 / (100 - q) - 1e-9)
