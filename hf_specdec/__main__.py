"""`python -m hf_specdec ...` is `hf-specdec ...` (for when the console script is not on PATH)."""

from hf_specdec.cli import main

raise SystemExit(main())
