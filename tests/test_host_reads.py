"""A plain step reads values back from the device (on a GPU: waits for it) no more often than plain generate()'s does.
Counted here on the CPU, by the aten ops that read a tensor's values on the host (`int()`, `bool()`, `.item()`,
`.tolist()`, `nonzero`, ...): what each would cost on a GPU is measured on one (docs/results.md), not here."""

import functools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LogitsProcessorList, MinNewTokensLengthLogitsProcessor, RepetitionPenaltyLogitsProcessor
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

import tiny_models
from hf_specdec.costs import StepCosts
from hf_specdec.policy import CostAwareDraftPolicy
from hf_specdec.processing import process_scores

# A drafter that can never pay: the default drafts nothing, so every step is a plain one.
NEVER = CostAwareDraftPolicy(costs=StepCosts(verify_ms={1: 1.0, 2: 2.0}, draft_ms=1e6), exploration=0.0)
READS = {"aten._local_scalar_dense.default", "aten.is_nonzero.default", "aten.item.default", "aten.equal.default",
         "aten.nonzero.default", "aten.masked_select.default", "aten._unique2.default", "aten.unique_dim.default",
         "aten.unique_consecutive.default"}


class HostReads(TorchDispatchMode):
    """Counts the ops that read a tensor's values on the host, and `Tensor.tolist` (which dispatches none)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += str(func) in READS
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        tolist = torch.Tensor.tolist

        @functools.wraps(tolist)
        def counted(tensor):
            self.count += 1
            return tolist(tensor)

        self._tolist, torch.Tensor.tolist = tolist, counted
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._tolist
        return super().__exit__(*exc)


def _reads(fn) -> int:
    with HostReads() as reads:
        fn()
    return reads.count


def test_the_counter_sees_each_kind_of_host_read():  # negative control for the counts below
    x = torch.arange(4)
    assert [_reads(f) for f in (lambda: int(x.sum()), lambda: bool(x.any()), lambda: x.tolist(), lambda: x.nonzero(),
                                lambda: x + 1)] == [1, 1, 1, 1, 0]


def _ragged():
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, 50, (3, 12), generator=generator), torch.tensor([7, 9, 9]), torch.randn(3, 50, generator=generator)


@pytest.mark.parametrize("processors", [
    [], [TemperatureLogitsWarper(0.7), TopKLogitsWarper(10), TopPLogitsWarper(0.9)],
    [RepetitionPenaltyLogitsProcessor(1.5)], [MinNewTokensLengthLogitsProcessor(5, 8, eos_token_id=2)],
], ids=["none", "score-only", "token-reading", "min-length"])
def test_every_row_selected_as_none_gives_the_same_scores(processors):
    sequences, lengths, scores = _ragged()
    processors = LogitsProcessorList(processors)
    every = torch.ones(3, dtype=torch.bool)
    assert torch.equal(process_scores(processors, sequences, lengths, scores, None),
                       process_scores(processors, sequences, lengths, scores, every))


@pytest.mark.parametrize("processors", [[], [TemperatureLogitsWarper(0.7), TopKLogitsWarper(10)]], ids=["none", "score-only"])
def test_every_row_of_greedy_or_score_only_processors_reads_nothing(processors):
    sequences, lengths, scores = _ragged()
    processors = LogitsProcessorList(processors)
    assert _reads(lambda: process_scores(processors, sequences, lengths, scores, None)) == 0
    # Negative control: the same rows given as a mask are looked at.
    assert _reads(lambda: process_scores(processors, sequences, lengths, scores, torch.ones(3, dtype=torch.bool))) > 0


@pytest.mark.parametrize("sampling", [{"do_sample": False}, {"do_sample": True, "temperature": 0.7, "top_k": 20}],
                         ids=["greedy", "sampled"])
@pytest.mark.parametrize("eos", [True, False], ids=["eos", "no-eos"])
def test_a_plain_step_reads_the_device_as_often_as_generates(target, unrelated_drafter, sampling, eos):
    """Reads per step, from the difference between a 40- and a 16-token call (what a call reads once cancels): ours
    against plain generate()'s on the same batch of 3 ragged prompts, every step a plain one."""
    input_ids, mask = tiny_models.prompts(3, seed=21)
    # An EOS criterion no row can meet (an id past the vocabulary: every call runs its full length, so no row leaves),
    # or none: then generate() runs the max-length check only.
    kwargs = dict(eos_token_id=tiny_models.VOCAB + 7 if eos else None, **sampling)

    def per_step(**extra) -> float:
        def call(new):
            return _reads(lambda: target.generate(input_ids, attention_mask=mask, max_new_tokens=new, **kwargs, **extra))

        call(4)  # (first-call work outside the counts)
        return (call(40) - call(16)) / 24

    ours, plain = per_step(drafter=unrelated_drafter, gamma=NEVER), per_step()
    assert plain > 0  # the counter saw generate()'s own reads
    assert ours <= plain + 0.25, (ours, plain)  # one more read a step would be 1.0 more
