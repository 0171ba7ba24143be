"""Faster multi-token forwards on CPU: oneDNN-packed weights for a model's Linear layers.

Contract: `pack_linears(model)` gives every float32 `nn.Linear` of `model` on the CPU a oneDNN copy of
its weight packed for matrix products (reordered once, kept beside the weight), and makes its forward use
it whenever the input holds at least `min_rows` rows (batch x tokens); single-row products keep
PyTorch's default kernel, which is the faster one for them. It changes how the model multiplies, never
what: results agree with the default kernels to float32 rounding, as the default kernels agree with
themselves across row counts. `unpack_linears(model)` undoes it. Opt in: it costs a second copy of every
Linear weight.

Why: on CPUs without bf16 matrix units (here an AVX2-only EPYC), MKL's float32 kernels for 2-16 rows
cost nearly as much per row as for one, so scoring 2 tokens costs ~1.7 single-token steps; packed
oneDNN weights bring a 2-token forward of SmolLM2-135M to ~1.2 steps (docs/how-it-works.md, "CPU kernels").
Speculative verification and batched decoding both score several rows at once.
"""

from __future__ import annotations

import functools
import os
import platform
import types
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

PACKED = "_hf_specdec_packed"  # (weight version, packed weight) on each packed Linear


def describe() -> str:
    """The CPU's model name, family and model, and whether it computes bf16 in hardware, e.g. 'AMD EPYC, family 25
    model 17 (avx512_bf16: yes, amx_bf16: no)': speed figures on a CPU mean little without it (bf16 verification is
    nearly free with these instructions and slow without them; a VM's model name alone, 'AMD EPYC', does not tell
    Zen 3, 4 and 5 apart). Read from /proc/cpuinfo; elsewhere the platform's processor name."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())  # the first processor's
    except OSError:
        return platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    found = ", ".join(f"{flag}: {'yes' if flag in flags else 'no'}" for flag in ("avx512_bf16", "amx_bf16"))
    name = fields.get("model name", platform.machine())
    if "cpu family" in fields and "model" in fields:
        name = f"{name}, family {fields['cpu family']} model {fields['model']}"
    return f"{name} ({found})"


@functools.lru_cache(maxsize=8)  # asked before every call that drafts with a feature head
def computes_bf16(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> bool:
    """Whether this CPU has bf16 arithmetic (AVX512-BF16 or AMX-BF16), from its /proc/cpuinfo flags: there a bf16
    model computes faster than in fp32; elsewhere bf16 is emulated and slower. False where cpuinfo is unreadable."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return False
    flags = {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def available() -> bool:
    """Whether this torch build can pack float32 Linear weights with oneDNN."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def _pack(module: nn.Linear) -> torch.Tensor:
    """Stores a oneDNN copy of `module.weight`, tagged with the weight's version, and returns it."""
    packed = torch.ops.mkldnn._reorder_linear_weight(module.weight.detach(), None)
    setattr(module, PACKED, (module.weight._version, packed))
    return packed


def _packed_forward(self: nn.Linear, input: torch.Tensor) -> torch.Tensor:
    rows = input.numel() // max(input.shape[-1], 1)
    if rows < self._hf_specdec_min_rows or torch.is_grad_enabled() or input.dtype != torch.float32:
        return F.linear(input, self.weight, self.bias)
    version, packed = getattr(self, PACKED)
    if version != self.weight._version:  # the weight changed in place since it was packed
        packed = _pack(self)
    flat = input.reshape(rows, input.shape[-1])
    output = torch.ops.mkldnn._linear_pointwise(flat, packed, self.bias, "none", [], "")
    return output.reshape(*input.shape[:-1], output.shape[-1])


def pack_linears(model: nn.Module, min_rows: int = 2) -> int:
    """Packs the float32 CPU `nn.Linear` layers of `model` (subclasses such as quantized layers are left
    alone) and returns how many. Idempotent."""
    if not available():
        raise RuntimeError("this torch build has no oneDNN (mkldnn) linear packing; pack_linears cannot help here.")
    count = 0
    with torch.no_grad():
        for module in model.modules():
            if type(module) is not nn.Linear or module.weight.device.type != "cpu" or module.weight.dtype != torch.float32:
                continue
            if not hasattr(module, PACKED):
                _pack(module)
                module.forward = types.MethodType(_packed_forward, module)
            module._hf_specdec_min_rows = min_rows
            count += 1
    return count


def unpack_linears(model: nn.Module) -> int:
    """Restores the default Linear forward and frees the packed copies; returns how many were packed."""
    count = 0
    for module in model.modules():
        if hasattr(module, PACKED):
            del module.forward, module._hf_specdec_min_rows
            delattr(module, PACKED)
            count += 1
    return count
