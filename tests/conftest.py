import pytest
import torch

import hf_specdec  # noqa: F401  (installs the drafter= keyword)
import tiny_models


@pytest.fixture(autouse=True)
def _few_threads():
    torch.set_num_threads(1)  # tiny models: threads only add overhead


@pytest.fixture(scope="session")
def target():
    return tiny_models.llama(seed=0)


@pytest.fixture(scope="session")
def unrelated_drafter():
    return tiny_models.llama(seed=1, layers=1, hidden=32)


@pytest.fixture(scope="session")
def partial_drafter(target):
    return tiny_models.perturbed(target, scale=0.1)


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_models.tokenizer()
