"""What one float32 product costs by the rows it multiplies, on `hf_specdec.cpu.pack_linears` weights (oneDNN) and on
torch's default kernels, at the Whisper-large-v3 decoder's shapes: why a step's measured cost need not grow with the
tokens it verifies on a CPU (docs/results.md, "Two threads on the same Zen 4").

Each shape runs over enough distinct layers that the weights come from memory, as in a decoding step, not from cache.
`python benchmarks/packed_rows.py --threads 1 --out benchmarks/data/packed_rows.json`
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn

from default_vs_best import commit
from encoder_decoder_speed import hf_specdec, save

#: (in, out, distinct layers): the MLP's two products, an attention projection, the head.
SHAPES = ((1280, 5120, 16), (5120, 1280, 16), (1280, 1280, 48), (1280, 51866, 2))


def per_layer_ms(layers: nn.Sequential, rows: int, repeats: int) -> float:
    """Median over `repeats` passes of one product per layer of `layers` on `rows` rows, in ms a layer."""
    x = torch.randn(1, rows, layers[0].in_features)
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):  # (the first pass warms the kernels: not timed)
            start = time.perf_counter()
            for layer in layers:
                layer(x)
            times.append((time.perf_counter() - start) / len(layers) * 1e3)
    return statistics.median(times[1:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4, 5, 8])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    table = []
    for fan_in, fan_out, count in SHAPES:
        default = nn.Sequential(*[nn.Linear(fan_in, fan_out) for _ in range(count)])
        packed = nn.Sequential(*[nn.Linear(fan_in, fan_out) for _ in range(count)])
        packed.load_state_dict(default.state_dict())
        hf_specdec.cpu.pack_linears(packed, min_rows=1)
        for rows in args.rows:
            table.append(dict(shape=[fan_in, fan_out], rows=rows,
                              packed_ms=round(per_layer_ms(packed, rows, args.repeats), 3),
                              default_ms=round(per_layer_ms(default, rows, args.repeats), 3)))
            print(json.dumps(table[-1]), flush=True)
    result = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit(),
                  machine=hf_specdec.cpu.describe(), threads=args.threads, torch=torch.__version__,
                  command=" ".join(["python", *sys.argv]), rows=table)
    if args.out:
        save(args.out, f"{result['machine']}, {args.threads} thread{'s' * (args.threads > 1)}, {result['commit']}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
