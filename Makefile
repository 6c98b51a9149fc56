.PHONY: setup demo test lint dev

setup: .venv/.installed

.venv/.installed: pyproject.toml scripts/setup.sh
	./scripts/setup.sh
	touch .venv/.installed

demo: setup
	.venv/bin/python -m ldtm_dagster.demo

test: setup
	.venv/bin/ruff check .
	.venv/bin/python -m pytest $(PYTEST_ARGS)

lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

dev: setup
	DAGSTER_HOME=$${DAGSTER_HOME:-$(CURDIR)/.dagster_home} ./scripts/dagster_home.sh && \
	DAGSTER_HOME=$${DAGSTER_HOME:-$(CURDIR)/.dagster_home} .venv/bin/dagster dev -w workspace.yaml
