.PHONY: setup demo test test-durations lint dev dashboard deploy-test gpu-wheels gpu-check

# One Dagster instance for `make demo` and `make dev`, so the UI shows what the demo materialised.
DAGSTER_HOME_DIR = $${DAGSTER_HOME:-$(CURDIR)/.dagster_home}
# The product serves the 103-ticker `full` universe by default; these local targets use `demo`.
DEMO_UNIVERSE = $${LDTM_UNIVERSE:-demo}

setup: .venv/.installed

.venv/.installed: pyproject.toml scripts/setup.sh
	./scripts/setup.sh
	touch .venv/.installed

demo: setup
	DAGSTER_HOME=$(DAGSTER_HOME_DIR) ./scripts/dagster_home.sh && \
	DAGSTER_HOME=$(DAGSTER_HOME_DIR) LDTM_UNIVERSE=$(DEMO_UNIVERSE) .venv/bin/python -m ldtm_dagster.demo

# Two pytest workers (pytest-xdist) that steal work from each other, the tests marked `slow` first (tests/conftest.py);
# TEST_WORKERS=0 runs the suite in one process. Times per CPU: docs/performance.md, "The test suite and CI".
TEST_WORKERS ?= 2

# Tests that restart the shared PostgreSQL server run alone afterwards: beside the other worker's PostgreSQL
# tests they cut those tests' connections (198 skipped once, issue 38 D12).
test: setup
	.venv/bin/ruff check .
	.venv/bin/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not restarts_server" $(PYTEST_ARGS)
	.venv/bin/python -m pytest -m restarts_server $(PYTEST_SERIAL_ARGS)

# The suite as `make test` runs it, then its 20 slowest tests (setup, call and teardown each timed).
test-durations:
	$(MAKE) test PYTEST_ARGS="--durations=20 $(PYTEST_ARGS)" PYTEST_SERIAL_ARGS="--durations=20 $(PYTEST_SERIAL_ARGS)"

lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

dev: setup
	DAGSTER_HOME=$(DAGSTER_HOME_DIR) ./scripts/dagster_home.sh && \
	DAGSTER_HOME=$(DAGSTER_HOME_DIR) LDTM_UNIVERSE=$(DEMO_UNIVERSE) .venv/bin/dagster dev -w workspace.yaml

# The forecast dashboard on http://localhost:8501; Streamlit flags via DASHBOARD_ARGS="--server.port 8600".
dashboard: setup
	.venv/bin/ldtm dashboard $(DASHBOARD_ARGS)

# The compose stack on a real Docker engine (minutes; not part of `make test`): builds the images offline
# from a cached debootstrap base and wheelhouse (LDTM_DEPLOY_CACHE, default /var/cache/ldtm-deploy), then
# follows docs/operations.md's offline recipe as written, and ends with a backup / down -v / restore.
deploy-test: setup
	./deploy/scripts/install_prerequisites.sh
	PYTHONPATH=$(CURDIR) .venv/bin/python deploy/test/deploy_test.py

# The GPU check (docs/operations.md, "Checking a GPU host"): gpu-wheels downloads, where PyPI answers,
# what an air-gapped GPU host lacks into .gpu_wheels/; gpu-check runs it (on a CPU: the dry run).
gpu-wheels: setup
	./scripts/gpu_wheels.sh

gpu-check:
	./scripts/gpu_check.sh $(GPU_CHECK_ARGS)
