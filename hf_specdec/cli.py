"""`hf-specdec` command line: one subcommand per module, each adding its own parser."""

from __future__ import annotations

import argparse

from hf_specdec import generate_cli
from hf_specdec.distill import cli as distill_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-specdec", description="Lossless speculative decoding for transformers.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in (generate_cli, distill_cli):
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args) or 0


if __name__ == "__main__":
    raise SystemExit(main())
