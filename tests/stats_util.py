"""Chi-square goodness of fit without scipy, shared by the statistical tests."""

from __future__ import annotations

import math

import torch

Z_999 = 3.090232  # standard normal quantile at 0.999


def chi2_threshold(df: int, z: float = Z_999) -> float:
    """Upper 0.999 quantile of chi-square(df), Wilson-Hilferty approximation (error < 1% for df >= 3)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi_square(observed: torch.Tensor, expected_probs: torch.Tensor, min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson statistic of `observed` counts against `expected_probs`; cells with expected count below
    `min_expected` are pooled into one. Returns (statistic, degrees of freedom). A count in a cell of
    probability 0 gives an infinite statistic: a sampler that emits impossible tokens always fails."""
    observed = observed.double().flatten()
    expected = expected_probs.double().flatten() * observed.sum()
    if bool(((expected == 0) & (observed > 0)).any()):
        return math.inf, 1
    small = expected < min_expected
    obs = torch.cat([observed[~small], observed[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    return float(((obs - exp) ** 2 / exp).sum()), int(keep.sum()) - 1


def fits(observed: torch.Tensor, expected_probs: torch.Tensor) -> bool:
    statistic, df = chi_square(observed, expected_probs)
    return statistic < chi2_threshold(max(df, 1))
