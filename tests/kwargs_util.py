"""The promise every kwarg test checks: with `drafter=`, plain generate()'s output, or a typed `SpeculativeError`
before the target's first forward that leaves its generation_config as it was; where plain generate() itself raises,
an error of the same type."""

import copy

import torch

from hf_specdec import errors


def check_against_plain(target, kwargs: dict, spec: dict, same, said: str = "", calls: int = 1,
                        forwards_allowed: int = 0) -> int:
    """Runs plain generate(**kwargs) once and generate(**kwargs, **spec) `calls` times (each seeded alike) and asserts
    the promise; `same(ours, plain)` compares outputs; `forwards_allowed`: target forwards a refusal may follow (a
    model's own generate() may run some before it hands the keywords on). Returns how many calls gave an output."""
    try:
        torch.manual_seed(0)
        plain, plain_error = target.generate(**kwargs), None
    except Exception as error:  # noqa: BLE001 (what plain generate() does with it, whatever it is)
        plain, plain_error = None, error
    config, outputs = copy.deepcopy(target.generation_config.to_dict()), 0
    for _ in range(calls):
        forwards = []
        hook = target.register_forward_hook(lambda *args: forwards.append(1))
        try:
            torch.manual_seed(0)
            ours, ours_error = target.generate(**kwargs, **spec), None
        except Exception as error:  # noqa: BLE001
            ours, ours_error = None, error
        finally:
            hook.remove()
        assert target.generation_config.to_dict() == config, said
        if ours_error is None:
            assert plain_error is None, f"{said}: plain generate() raised {plain_error!r}; ours returned an output"
            assert same(ours, plain), f"{said}: not plain generate()'s output"
            outputs += 1
        elif isinstance(ours_error, errors.SpeculativeError):
            assert len(forwards) <= forwards_allowed, f"{said}: refused after the target ran"
        else:  # only where plain generate() raises the same (generate() checks the kwarg before our loop runs)
            assert plain_error is not None and type(ours_error) is type(plain_error), f"{said}: {ours_error!r}"
    return outputs
