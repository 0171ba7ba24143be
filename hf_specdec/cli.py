"""`hf-specdec` command line: one subcommand per module, each adding its own parser."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-specdec", description="Lossless speculative decoding for transformers.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in ("hf_specdec.generate_cli", "hf_specdec.distill.cli"):
        try:
            add_parser = __import__(module, fromlist=["add_parser"]).add_parser
        except ImportError:
            continue
        add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args) or 0


if __name__ == "__main__":
    raise SystemExit(main())
