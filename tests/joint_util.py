"""Exact joint distributions of a target's first tokens, tested with stats_util's chi-square.

The oracle is plain autoregressive sampling written out by enumeration: P(x1, ..., xn) is the product of
the target's processed next-token distributions (temperature, then top-k, as generate() applies them),
kept sparse over the top-k support so a full-size vocabulary stays cheap.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper

from stats_util import chi2_threshold, chi_square


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


def joint_chi_square(samples: torch.Tensor, joint: dict[tuple[int, ...], float]) -> tuple[float, float]:
    """Goodness of fit of `samples` ([num_samples, n] token rows) to `joint`: (statistic, threshold at the
    0.999 quantile, Wilson-Hilferty). A sample outside the support makes the statistic inf."""
    cells = {cell: index for index, cell in enumerate(joint)}
    observed = torch.zeros(len(cells) + 1)  # the last cell: everything outside the support
    for row in samples.tolist():
        observed[cells.get(tuple(row), len(cells))] += 1
    expected_probs = torch.tensor([*joint.values(), 0.0], dtype=torch.float64)
    statistic, df = chi_square(observed, expected_probs)
    return statistic, chi2_threshold(max(df, 1))


def sample_continuations(target, prompt, drafter, gamma, *, num_samples, num_tokens=3, seed=0, **processing):
    """`num_samples` sampled continuations of `prompt` in one batched speculative generate() call (rows
    are independent), explicit generator; `processing` are generate()'s sampling kwargs (temperature,
    top_k, ...). Returns ([num_samples, num_tokens] tokens, SpeculativeStats)."""
    import hf_specdec

    stats = hf_specdec.SpeculativeStats()
    out = target.generate(
        prompt.repeat(num_samples, 1),
        do_sample=True,
        max_new_tokens=num_tokens,
        drafter=drafter,
        gamma=gamma,
        generator=torch.Generator().manual_seed(seed),
        stats=stats,
        **processing,
    )
    return out[:, prompt.shape[1] :], stats


#: Two prompts of different lengths for `padded_pair_fits`: A (5 tokens) and B (3 tokens, left-padded by 2).
PROMPT_A, PROMPT_B = [1, 5, 7, 3, 5], [1, 8, 2]


def padded_pair_fits(target, drafter, gamma, num_samples: int, temperature: float = 1.2, top_k: int = 6):
    """Samples 3 tokens for `num_samples` rows, half PROMPT_A and half left-padded PROMPT_B, in one batched
    speculative call (seed 0), and checks each half against its exact joint by chi-square (0.999 quantile), with a
    control that must fail: A's samples against B's joint. Returns (A's samples, A's joint, the call's
    SpeculativeStats) for further checks."""
    import hf_specdec

    half = num_samples // 2
    input_ids = torch.tensor([PROMPT_A] * half + [[0, 0] + PROMPT_B] * half)
    mask = torch.tensor([[1] * 5] * half + [[0, 0, 1, 1, 1]] * half)
    stats = hf_specdec.SpeculativeStats()
    out = target.generate(
        input_ids, attention_mask=mask, do_sample=True, max_new_tokens=3, drafter=drafter, gamma=gamma,
        temperature=temperature, top_k=top_k, generator=torch.Generator().manual_seed(0), stats=stats,
    )[:, 5:]
    joint_a = exact_joint(target, torch.tensor([PROMPT_A]), 3, temperature, top_k)
    joint_b = exact_joint(target, torch.tensor([PROMPT_B]), 3, temperature, top_k)
    for samples, joint in ((out[:half], joint_a), (out[half:], joint_b)):
        statistic, threshold = joint_chi_square(samples, joint)
        assert statistic < threshold, (statistic, threshold)
    statistic, threshold = joint_chi_square(out[:half], joint_b)
    assert statistic > threshold, (statistic, threshold)
    return out[:half], joint_a, stats
