"""Exact joint distributions of a target's first tokens and a scipy-free chi-square goodness-of-fit test.

The oracle is plain autoregressive sampling written out by enumeration: P(x1, x2, x3) is the product of
the target's processed next-token distributions (temperature, then top-k, as generate() applies them).
"""

from __future__ import annotations

import math

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper

# Upper 1e-3 quantile of the standard normal: a correct sampler fails one test in a thousand; the
# seeds are fixed, so a test either always passes or always fails.
Z_999 = 3.0902
MIN_EXPECTED = 5.0  # cells expected to hold fewer samples are pooled into one bin


def chi2_quantile(df: int, z: float = Z_999) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile: df * (1 - 2/(9 df) + z sqrt(2/(9 df)))^3.
    Checked against the exact quantile (bisection on torch.special.gammainc): +1.2% at df=5, +0.6% at
    df=10, +0.07% at df=63 (103.51 vs 103.44); slightly conservative, as a test threshold should be."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


@torch.no_grad()
def exact_joint(
    model, prompt: torch.Tensor, num_tokens: int, temperature: float, top_k: int
) -> dict[tuple[int, ...], float]:
    """{(x1, ..., xn): probability} over every continuation of `prompt` ([1, length]) with nonzero mass."""
    processors = LogitsProcessorList([TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k)])
    joint = {(): 1.0}
    for _ in range(num_tokens):
        prefixes = list(joint)
        continuations = torch.tensor(prefixes, dtype=torch.long).reshape(len(prefixes), -1)  # [prefixes, step]
        inputs = torch.cat([prompt.repeat(len(prefixes), 1), continuations], dim=1)
        logits = model(inputs).logits[:, -1].float()  # [prefixes, vocab]
        probs = processors(inputs, logits).softmax(dim=-1).double()
        joint = {
            prefix + (token,): joint[prefix] * float(probs[i, token])
            for i, prefix in enumerate(prefixes)
            for token in probs[i].nonzero().squeeze(1).tolist()
        }
    return joint


def chi_square(samples: torch.Tensor, joint: dict[tuple[int, ...], float]) -> tuple[float, float]:
    """Goodness of fit of `samples` ([num_samples, n] token rows) to `joint`.

    Returns (statistic, threshold at the 0.999 quantile). The statistic is inf when a sample falls
    outside the support, which no correct sampler can produce.
    """
    num_samples = samples.shape[0]
    counts: dict[tuple[int, ...], int] = {}
    for row in samples.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    if any(cell not in joint for cell in counts):
        return math.inf, 0.0
    big = [cell for cell, prob in joint.items() if prob * num_samples >= MIN_EXPECTED]
    observed = [counts.get(cell, 0) for cell in big]
    expected = [joint[cell] * num_samples for cell in big]
    pooled = num_samples - sum(expected)
    if pooled >= MIN_EXPECTED:  # everything else, as one bin
        observed.append(num_samples - sum(observed))
        expected.append(pooled)
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
    return statistic, chi2_quantile(len(expected) - 1)
