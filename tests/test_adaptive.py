"""Adaptive draft length (gamma="auto", DraftPolicy) and the confidence stop: the schedule itself, then
exactness (greedy equality, joint distribution) with every form of gamma."""

import dataclasses
import math

import pytest
import torch

import hf_specdec
import tiny_models
from joint_util import exact_joint, joint_chi_square, sample_continuations
from hf_specdec.compat import check_gamma
from hf_specdec.drafters.base import DraftContext
from hf_specdec.drafters.model import ModelDrafter, ModelDraftSession
from hf_specdec.errors import InvalidGammaError
from hf_specdec.policy import DraftPolicy, HeuristicDraftPolicy, Schedule


@pytest.fixture(scope="module")
def close_drafter(target):
    """Agrees with the target often enough (greedy alpha ~0.35) for long accepted runs."""
    return tiny_models.perturbed(target, scale=0.2)


# --- the policies ------------------------------------------------------------------------------------


def test_gamma_forms_resolve_to_policies():
    assert check_gamma(3) == DraftPolicy(max_gamma=3, min_confidence=0.0)
    assert check_gamma("auto") == HeuristicDraftPolicy()
    assert HeuristicDraftPolicy() == HeuristicDraftPolicy(max_gamma=16, start_gamma=4, min_confidence=0.4)
    policy = HeuristicDraftPolicy(max_gamma=8, min_confidence=0.0)
    assert check_gamma(policy) is policy


@pytest.mark.parametrize("gamma", [0, -1, True, 2.0, "Auto", "4", HeuristicDraftPolicy])
def test_invalid_gamma_raises_before_decoding(gamma):
    with pytest.raises(InvalidGammaError, match="gamma must be"):
        check_gamma(gamma)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(max_gamma=0), "max_gamma"),
        (dict(min_confidence=1.5), "min_confidence"),
        (dict(min_confidence=-0.1), "min_confidence"),
        (dict(start_gamma=0), "start_gamma"),
        (dict(max_gamma=4, start_gamma=5), "must not exceed"),
        (dict(increase=-1), "increase"),
    ],
)
def test_invalid_policy_fields_raise(kwargs, message):
    with pytest.raises(InvalidGammaError, match=message):
        HeuristicDraftPolicy(**kwargs)


def test_policies_are_frozen_and_keyword_only():
    with pytest.raises(dataclasses.FrozenInstanceError):
        HeuristicDraftPolicy().max_gamma = 3
    with pytest.raises(TypeError):
        DraftPolicy(4)


def test_fixed_policy_keeps_its_length():
    policy = DraftPolicy(max_gamma=5)
    lengths = policy.initial_lengths(3, torch.device("cpu"))
    assert lengths.tolist() == [5, 5, 5]
    counts = torch.tensor([5, 5, 0])
    assert policy.next_lengths(lengths, torch.ones(3, dtype=torch.bool), counts, counts).tolist() == [5, 5, 5]


def test_heuristic_schedule_moves_each_row_on_its_own():
    policy = HeuristicDraftPolicy(max_gamma=6, start_gamma=3)
    lengths = policy.initial_lengths(6, torch.device("cpu"))
    assert lengths.tolist() == [3] * 6
    lengths = torch.tensor([3, 3, 5, 1, 3, 3])
    active = torch.tensor([True, True, True, True, True, False])
    num_drafted = torch.tensor([3, 3, 5, 1, 0, 3])
    num_accepted = torch.tensor([3, 1, 5, 0, 0, 3])
    # all accepted: +2; a rejection: -1; capped at max_gamma; floored at 1; no draft or inactive: kept.
    assert policy.next_lengths(lengths, active, num_drafted, num_accepted).tolist() == [5, 2, 6, 1, 3, 3]


def test_a_row_cut_short_by_the_confidence_stop_and_fully_accepted_grows():
    policy = HeuristicDraftPolicy(max_gamma=8)
    lengths = policy.next_lengths(torch.tensor([6]), torch.tensor([True]), torch.tensor([2]), torch.tensor([2]))
    assert lengths.tolist() == [8]


# --- the confidence stop in ModelDrafter -------------------------------------------------------------


def _greedy_context(input_ids, attention_mask, min_confidence):
    batch, length = input_ids.shape
    sequences = torch.cat([input_ids, torch.full((batch, 8), tiny_models.PAD)], dim=1)
    return DraftContext(
        sequences=sequences,
        pad_lens=(attention_mask == 0).sum(dim=1),
        lens=torch.full((batch,), length),
        active=torch.ones(batch, dtype=torch.bool),
        vocab_size=tiny_models.VOCAB,
        do_sample=False,
        generator=None,
        process=lambda scores, lengths, rows: torch.where(rows[:, None], scores, 0.0),
        min_confidence=min_confidence,
    )


@torch.no_grad()
def test_confidence_stop_ends_each_row_after_its_first_doubtful_token(close_drafter):
    input_ids, attention_mask = tiny_models.prompts(batch=8, seed=4)
    threshold, cap = 0.1, 6  # for these prompts rows stop after 1 to 6 tokens
    session = ModelDrafter(close_drafter).start(close_drafter, 8, torch.device("cpu"))
    draft = session.propose(_greedy_context(input_ids, attention_mask, threshold), torch.full((8,), cap))
    counts = draft.num_drafted.tolist()
    assert len(set(counts)) > 1 and min(counts) >= 1  # rows stopped independently
    assert draft.tokens.shape[1] == max(counts)  # the step ended when the last row stopped
    assert session.num_forwards == max(counts)
    for row, count in enumerate(counts):
        tokens = input_ids[row, attention_mask[row].bool()]
        drafted = draft.tokens[row, :count]
        assert (draft.tokens[row, count:] == -1).all()
        context = torch.cat([tokens, drafted])[None]
        probs = close_drafter(context).logits[0, tokens.shape[0] - 1 :].softmax(dim=-1)  # [count + 1, vocab]
        confidence = probs[torch.arange(count), drafted]  # the drafter's probability of its own proposals
        assert torch.equal(drafted, probs[:count].argmax(dim=-1))
        assert (confidence[:-1] >= threshold).all()  # it kept going while confident...
        assert count == cap or confidence[-1] < threshold  # ...and stopped right after a doubtful token


@torch.no_grad()
def test_path_stop_ends_each_row_once_its_drafts_probabilities_multiply_below_the_floor(close_drafter):
    input_ids, attention_mask = tiny_models.prompts(batch=8, seed=4)
    floor, cap = 0.02, 6
    session = ModelDrafter(close_drafter).start(close_drafter, 8, torch.device("cpu"))
    context = dataclasses.replace(_greedy_context(input_ids, attention_mask, 0.0), min_path=floor)
    draft = session.propose(context, torch.full((8,), cap))
    counts = draft.num_drafted.tolist()
    assert len(set(counts)) > 1 and min(counts) >= 1  # rows stopped independently
    for row, count in enumerate(counts):
        tokens = input_ids[row, attention_mask[row].bool()]
        drafted = draft.tokens[row, :count]
        probs = close_drafter(torch.cat([tokens, drafted])[None]).logits[0, tokens.shape[0] - 1 :].softmax(dim=-1)
        path = probs[torch.arange(count), drafted].cumprod(dim=0)  # the drafter's odds that all of them are accepted
        assert (path[:-1] >= floor).all()  # it kept going while the odds held...
        assert count == cap or path[-1] < floor  # ...and stopped right after the draft that took them below the floor
    # Odds read by bands of the drafter's probability, each band's above the probabilities in it (a drafter that says
    # less than it gets right): rows go deeper; read at a low band's odds, not as deep.
    def drafted(bands):
        return ModelDrafter(close_drafter).start(close_drafter, 8, torch.device("cpu")).propose(
            dataclasses.replace(context, path_odds=bands), torch.full((8,), cap)).num_drafted
    deeper, shallower = drafted((0.4, 0.8, 1.0, 1.0, 1.0)), drafted((0.01, 0.2, 0.4, 0.6, 0.8))
    assert (deeper >= draft.num_drafted).all() and (deeper > draft.num_drafted).any()
    assert (shallower <= draft.num_drafted).all() and (shallower < draft.num_drafted).any()
    # A floor after each number of drafts (the last for any more): the same floor given by depth stops alike; a high
    # one after 2 drafts stops every row that got that far, and no other row earlier.
    by_depth = ModelDrafter(close_drafter).start(close_drafter, 8, torch.device("cpu")).propose(
        dataclasses.replace(context, min_path=(floor,) * 2), torch.full((8,), cap)).num_drafted
    assert torch.equal(by_depth, draft.num_drafted)
    cut = ModelDrafter(close_drafter).start(close_drafter, 8, torch.device("cpu")).propose(
        dataclasses.replace(context, min_path=(floor, math.inf, floor)), torch.full((8,), cap)).num_drafted
    assert torch.equal(cut, draft.num_drafted.clamp(max=2)) and (draft.num_drafted > 2).any()


@torch.no_grad()
def test_sampled_drafts_odds_read_the_drafters_top_probability_and_the_confidence_stop_the_drawn_one(close_drafter):
    # A sampled draft's own probability tells its acceptance poorly; the drafter's certainty at the position is the
    # odds' signal. The confidence stop keeps its meaning: the drawn token's probability.
    input_ids, attention_mask = tiny_models.prompts(batch=8, seed=4)
    cap, generator = 6, torch.Generator().manual_seed(0)
    for floor, threshold in ((0.02, 0.0), (0.0, 0.1)):
        session = ModelDrafter(close_drafter).start(close_drafter, 8, torch.device("cpu"))
        context = dataclasses.replace(_greedy_context(input_ids, attention_mask, threshold), do_sample=True,
                                      generator=generator, min_path=floor)
        draft = session.propose(context, torch.full((8,), cap))
        counts = draft.num_drafted.tolist()
        assert len(set(counts)) > 1 and min(counts) >= 1
        for row, count in enumerate(counts):
            drawn = draft.probs[row, torch.arange(count), draft.tokens[row, :count]]
            top = draft.probs[row, :count].max(dim=-1).values
            assert torch.equal(draft.confidence[row, :count], top)
            signal = top.cumprod(dim=0) if floor else drawn  # the path stop: the tops' product; the other: drawn
            bound = floor or threshold
            assert (signal[:-1] >= bound).all() and (count == cap or signal[-1] < bound), (row, signal, bound)
        assert floor == 0 or (draft.confidence > 0).all()


# --- exactness ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True)
class _PathStop(DraftPolicy):
    """Chains with a path stop at `floor`, odds read by `bands` (the default sets its own per step, from its costs)."""

    floor: float = 0.0
    bands: tuple = ()

    def start(self, batch_size, device, **call):
        schedule = Schedule(self, batch_size, device)
        schedule.path_stop = (self.floor, self.bands)
        return schedule


POLICIES = {
    "auto": "auto",
    "heuristic_from_1": HeuristicDraftPolicy(max_gamma=5, start_gamma=1, min_confidence=0.0),
    "fixed_with_path_stop": _PathStop(max_gamma=5, floor=0.05),
    "fixed_with_confidence_stop": DraftPolicy(max_gamma=5, min_confidence=0.13),
    "heuristic_with_confidence_stop": HeuristicDraftPolicy(max_gamma=8, min_confidence=0.13),
}


@pytest.mark.parametrize("gamma", POLICIES.values(), ids=POLICIES.keys())
def test_greedy_equals_plain_generate_left_padded_batch(target, close_drafter, gamma):
    input_ids, attention_mask = tiny_models.prompts(batch=5, seed=4)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, do_sample=False, max_new_tokens=32)
    stats = hf_specdec.SpeculativeStats()
    out = target.generate(**kwargs, drafter=close_drafter, gamma=gamma, stats=stats)
    assert torch.equal(out, target.generate(**kwargs))
    assert int(stats.accepted.sum()) > 0
    assert stats.accepted_histogram.shape[1] == check_gamma(gamma).max_gamma + 1


@pytest.mark.parametrize("gamma", POLICIES.values(), ids=POLICIES.keys())
def test_greedy_equals_plain_generate_batch_1(target, close_drafter, gamma):
    input_ids = tiny_models.prompts(batch=1, seed=5)[0]
    kwargs = dict(do_sample=False, max_new_tokens=40)
    out = target.generate(input_ids, **kwargs, drafter=close_drafter, gamma=gamma)
    assert torch.equal(out, target.generate(input_ids, **kwargs))


def test_auto_with_prompt_lookup_equals_plain_generate(target):
    input_ids = target.generate(torch.tensor([[5, 6, 7, 8]]), do_sample=False, max_new_tokens=30)
    kwargs = dict(do_sample=False, max_new_tokens=30)
    stats = hf_specdec.SpeculativeStats()
    out = target.generate(input_ids, **kwargs, drafter="prompt_lookup", gamma="auto", stats=stats)
    assert torch.equal(out, target.generate(input_ids, **kwargs))
    assert int(stats.histogram[5:].sum()) > 0  # the schedule grew past the start length on the loop


def test_rows_of_a_batch_get_different_draft_lengths(target, close_drafter):
    seen = []

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Recording(HeuristicDraftPolicy):
        def next_lengths(self, lengths, active, num_drafted, num_accepted):
            seen.append(num_drafted.clone())
            return super().next_lengths(lengths, active, num_drafted, num_accepted)

    input_ids, attention_mask = tiny_models.prompts(batch=4, seed=6)
    policy = Recording(max_gamma=8, min_confidence=0.0)
    target.generate(input_ids, attention_mask=attention_mask, max_new_tokens=24, drafter=close_drafter, gamma=policy)
    assert any(len(set(step.tolist())) > 1 for step in seen)


# Three tokens under temperature 0.7 / top-k 4 (at most 64 outcomes); N = 3000 rows in one batched
# call (rows are independent); one seed per test.
NUM_SAMPLES, TEMPERATURE, TOP_K = 3000, 0.7, 4
CONFIDENCE = 0.3  # the drafter continues after 2 of its 4 possible first tokens (q = 0.44, 0.33, 0.12, 0.11)


@pytest.fixture(scope="module")
def prompt_and_joint(target):
    prompt = tiny_models.prompts(batch=1, seed=7, max_len=8)[0]
    return prompt, exact_joint(target, prompt, 3, TEMPERATURE, TOP_K)


def _sample(target, prompt, drafter, gamma, seed=0, num_tokens=3, top_k=TOP_K):
    return sample_continuations(
        target, prompt, drafter, gamma, num_samples=NUM_SAMPLES, temperature=TEMPERATURE, top_k=top_k,
        num_tokens=num_tokens, seed=seed,
    )


SAMPLING_POLICIES = {
    "auto": "auto",
    "heuristic_from_1": HeuristicDraftPolicy(max_gamma=4, start_gamma=1, min_confidence=0.0),
    "confidence_stop": DraftPolicy(max_gamma=3, min_confidence=CONFIDENCE),
    "path_stop": _PathStop(max_gamma=3, floor=CONFIDENCE / 2),
}


@pytest.mark.parametrize("gamma", SAMPLING_POLICIES.values(), ids=SAMPLING_POLICIES.keys())
def test_sampling_follows_the_target_joint_distribution(target, close_drafter, prompt_and_joint, gamma):
    prompt, joint = prompt_and_joint
    samples, stats = _sample(target, prompt, close_drafter, gamma)
    assert int(stats.accepted.sum()) > 0.1 * NUM_SAMPLES
    statistic, threshold = joint_chi_square(samples, joint)
    assert statistic < threshold, (statistic, threshold)


def test_sampling_follows_the_target_while_the_schedule_moves(target, close_drafter):
    """Six tokens under top-k 2 (at most 64 outcomes): long enough for rows to grow and shrink their
    draft lengths (1 -> 3 -> 2 ...) inside the sampled window."""
    prompt = tiny_models.prompts(batch=1, seed=7, max_len=8)[0]
    joint = exact_joint(target, prompt, 6, TEMPERATURE, 2)
    policy = HeuristicDraftPolicy(max_gamma=4, start_gamma=1, min_confidence=0.0)
    samples, stats = _sample(target, prompt, close_drafter, policy, num_tokens=6, top_k=2)
    assert int(stats.histogram[2:].sum()) > 0.1 * NUM_SAMPLES  # lengths did grow past the start
    statistic, threshold = joint_chi_square(samples, joint)
    assert statistic < threshold, (statistic, threshold)


class _DropDoubtfulSession(ModelDraftSession):
    """The wrong confidence stop (negative control): drops the doubtful token instead of verifying it,
    so the drafts that reach verification follow q restricted to confident tokens, not q. (The path stop reads
    the drafter's top probability, a function of the prefix: where it ends a row does not depend on the last
    draft's value. This control reads the drawn tokens' probabilities for both stops, as a stop must not.)"""

    def propose(self, ctx, num_tokens):
        draft = super().propose(ctx, num_tokens)
        last = (draft.num_drafted - 1).clamp_min(0)[:, None]  # [batch, 1]
        confidences = draft.probs.gather(2, draft.tokens.clamp_min(0)[:, :, None]).squeeze(2)  # [batch, width]
        path = confidences.cumprod(dim=1).gather(1, last).squeeze(1)  # (odds as given: the probabilities)
        confidence = confidences.gather(1, last).squeeze(1)
        doubtful = ((confidence < ctx.min_confidence) | (path < ctx.min_path)) & (draft.num_drafted > 0)  # [batch]
        draft.num_drafted = draft.num_drafted - doubtful.long()
        return draft


class _DropDoubtfulDrafter(ModelDrafter):
    def start(self, target, batch_size, device):
        return _DropDoubtfulSession(super().start(target, batch_size, device).cached)


@pytest.mark.parametrize("stop", ["confidence_stop", "path_stop"])
def test_negative_control_dropping_the_doubtful_token_fails(target, close_drafter, prompt_and_joint, stop):
    prompt, joint = prompt_and_joint
    samples, _ = _sample(target, prompt, _DropDoubtfulDrafter(close_drafter), SAMPLING_POLICIES[stop])
    statistic, threshold = joint_chi_square(samples, joint)
    assert statistic > threshold, (statistic, threshold)


def test_public_api_takes_policies_and_prompt_lookup(target):
    input_ids = target.generate(torch.tensor([[5, 6, 7, 8]]), do_sample=False, max_new_tokens=20)
    policy = hf_specdec.HeuristicDraftPolicy(max_gamma=6, start_gamma=2)
    drafter = hf_specdec.PromptLookupDrafter(max_ngram_size=2)
    out = hf_specdec.speculative_generate(target, drafter, input_ids, gamma=policy, do_sample=False, max_new_tokens=12)
    assert torch.equal(out, target.generate(input_ids, do_sample=False, max_new_tokens=12))
    with pytest.raises(InvalidGammaError):
        target.generate(input_ids, drafter=drafter, gamma="fast", max_new_tokens=4)
