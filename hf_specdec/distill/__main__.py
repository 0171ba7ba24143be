import sys

from .cli import main

sys.exit(main(["distill", *sys.argv[1:]] if sys.argv[1:2] != ["distill"] else sys.argv[1:]))
