# `make up`: everything a developer needs, started. `make test`: the tests,
# with what they need brought up first. `make down`: stop what `up` started.
SHELL := /bin/bash
# Debian's own Python first: the venv's interpreter must be one the service
# user can run (a pyenv build under /root is root's alone).
PYTHON ?= $(shell ls /usr/bin/python3.11 2>/dev/null || command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
export FLASK_APP := wsgi.py

.PHONY: up install wheel docs test test-fast lint down bench cluster s3 postgres test-tools node-torch node-jupyter pyslurm

# The server, the reconciler and their admin commands run as the service
# user (scripts/services); the key file for the developer is copied out.
# The dev site runs images (runtime pyxis) from the registry on the dev
# cluster's bridge, which is also its mirror: names without a registry
# (the docs' default image) come from it. The same images behind a login
# are a private registry, whose login the dev org holds in its secrets.
DEV_REGISTRY := 10.77.0.1:5000
DEV_PRIVATE_REGISTRY := 10.77.0.1:5001
DEV_NODE_CONF := $(or $(DIV_DEV_SLURM_CONF_DIR),/etc/slurm)/divergent-node.conf
DEV_REGISTRY_LOGIN := $(or $(DIV_DEV_STATE),/var/lib/div-dev)/registry-private.login
up: $(VENV)/.installed cluster s3 node-torch node-jupyter services.env
	slurm/dev/images
	scripts/services exec $(BIN)/flask db upgrade
	scripts/services start
	scripts/services exec $(BIN)/flask dev-bootstrap --env-file instance/dev.env
	scripts/services exec $(BIN)/flask site --runtime pyxis >/dev/null
	@# div shell and div notebook reach runs at their jobs' addresses, as the nodes number
	@# them; browsers open notebooks at notebooks.localhost (a loopback name no resolver is asked for).
	scripts/services exec $(BIN)/flask site interactive \
		--job-subnets "$$(. $(DEV_NODE_CONF) && echo "$$JOB_SUBNETS")" --notebook-host notebooks.localhost >/dev/null
	scripts/services exec $(BIN)/flask site images --mirror $(DEV_REGISTRY) \
		--insecure $(DEV_REGISTRY) --insecure $(DEV_PRIVATE_REGISTRY) \
		--login $(DEV_PRIVATE_REGISTRY)=DEV_REGISTRY
	install -m 600 instance/dev.env .div-dev.env
	printf '%s\n' DIV_DEV_REGISTRY=$(DEV_REGISTRY) DIV_DEV_PRIVATE_REGISTRY=$(DEV_PRIVATE_REGISTRY) >> .div-dev.env
	cat $(S3_BASE)/s3.env >> .div-dev.env
	@# The dev org's S3 secrets are the dev S3 server's keys: div storage import works at once.
	set -a; . ./.div-dev.env; set +a; for name in $(S3_SECRETS); do \
		printf %s "$${!name}" | $(BIN)/div secrets set $$name >/dev/null || exit 1; done
	login=$$(cat $(DEV_REGISTRY_LOGIN)); set -a; . ./.div-dev.env; set +a; \
		printf %s "$${login%%:*}" | $(BIN)/div secrets set DEV_REGISTRY_USERNAME >/dev/null && \
		printf %s "$${login#*:}" | $(BIN)/div secrets set DEV_REGISTRY_PASSWORD >/dev/null
	@echo "copied to .div-dev.env (mode 0600): set -a; . ./.div-dev.env; set +a"

# The dev stack's own settings (scripts/services reads them): its org may
# send webhooks to receivers on this machine, which a site never allows;
# S3 transfer runs use the dev registry's image with boto3.
services.env: Makefile
	printf '%s\n' '# The dev stack'"'"'s settings (make up); scripts/services reads them.' \
		'DIV_WEBHOOK_ALLOWED_NETWORKS=127.0.0.1/32' \
		'DIV_TRANSFER_IMAGE=$(DEV_REGISTRY)/div/python:3.11' > $@
	chmod 644 $@

# A login node's install (docs/admins/login-node.md): the venv and
# the package with what runs it alone (no test tools), no dev cluster; the
# units in deploy/ run it.
install:
	$(call venv_with,requirements.txt)
	@echo "installed in $(CURDIR)/$(VENV); next: deploy/ (systemd units, nginx site, env file)"

# The package as a wheel in dist/: `pip install` of it is the CLI alone;
# with [server], the server.
wheel: $(VENV)/.installed
	$(BIN)/pip wheel -q --no-deps --no-build-isolation -w dist .

# The core end to end on the second profile (tests/test_site2.py), then
# everything on the docs' cluster, TEST_WORKERS tests side by side
# (pytest-xdist: the tests mostly wait on Slurm; tests/cluster_turns.py
# gives the few that change the cluster for all their turn alone, last).
# It ends with the 25 slowest tests.
TEST_WORKERS ?= 4
test: lint cluster s3 postgres test-tools
	@# pyslurm builds (minutes, the first time) while torch downloads.
	scripts/pyslurm-wheel & built=$$!; $(NODE_TORCH_INSTALL) && $(NODE_JUPYTER_INSTALL) && \
		slurm/dev/images; torch=$$?; \
		wait $$built && exit $$torch
	DIV_DEV_PROFILE=site2 slurm/dev/up && $(BIN)/pytest -m site2; site2=$$?; \
	slurm/dev/up && $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25; rc=$$?; \
	exit $$(( rc || site2 ))

# The tests that need neither Slurm nor a server (tests/conftest.py marks
# the others `cluster`), two at a time: about half a minute, for the loop
# while editing; hermetic, so a running dev stack (make up) is no matter.
test-fast: lint postgres
	$(BIN)/pytest -m "not cluster" -q -n 2

# Every benchmark in bench/ on the dev stack, then one table (bench/all.py).
bench: up pyslurm test-tools
	$(BIN)/python bench/all.py

# Python (ruff; mypy, [tool.mypy] in pyproject.toml), the manual (mkdocs
# --strict), and every shell script: the batch script's fragments
# (slurm/batch/, with its .shellcheckrc), the golden scripts they render
# (whole: their quoted values are literal on purpose, their functions run
# through declare -f) and the dev and node scripts.
SHELL_SCRIPTS := slurm/dev/up slurm/dev/down slurm/dev/common.sh slurm/node/prolog \
	slurm/node/epilog slurm/node/common.sh s3/dev/up s3/dev/down scripts/services \
	slurm/dev/containers slurm/dev/images slurm/node/image-pull slurm/node/enroot/11-nologin-shell.sh slurm/node/enroot/12-no-nested-userns.sh \
	scripts/postgres-up scripts/pyslurm-wheel deploy/identity/install deploy/identity/divergent-org-user .ci/run
lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy
	@command -v shellcheck >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null)
	shellcheck slurm/batch/*.sh
	shellcheck -s bash -e SC2016,SC2317 tests/golden/*.sh
	shellcheck -x -S warning $(SHELL_SCRIPTS)
	$(BIN)/mkdocs build --strict -q

# The manual (docs/, MkDocs) into site/; the API reference is rendered from
# the server's own OpenAPI description as it builds (docs/hooks.py).
docs: $(VENV)/.installed
	$(BIN)/mkdocs build --strict

down:
	-scripts/services stop
	s3/dev/down
	slurm/dev/down

cluster:
	slurm/dev/up

# The dev S3 server (Debian's Swift on 127.0.0.1 and the dev cluster's bridge);
# its keys in $(S3_BASE)/s3.env.
S3_BASE := $(or $(DIV_S3_BASE),/var/lib/div-s3)
S3_SECRETS := AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_DEFAULT_REGION
s3:
	s3/dev/up

postgres:
	scripts/postgres-up

# pyslurm for the cluster's Slurm, built once and kept as a wheel.
pyslurm: $(VENV)/.installed cluster
	scripts/pyslurm-wheel

# The distributed tests run real torch (CPU, gloo) inside runs, on the
# nodes' own Python: installed for it once, beside Debian's packages
# (/usr/local), as a site's admin would.
NODE_TORCH = 2.13.0
NODE_TORCH_INSTALL = /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null || \
	/usr/bin/python3 -m pip install -q --break-system-packages 'torch==$(NODE_TORCH)' numpy
node-torch: cluster
	@$(NODE_TORCH_INSTALL)

# div notebook's JupyterLab, on the nodes' own Python (runtime none) and so
# in the dev images made from it (slurm/dev/images), as a site's admin would.
# Its requests would bring urllib3 2 under /usr/local, over the urllib3 1.26
# Debian's boto3 needs (S3 transfers run on the nodes' Python): kept below 2.
NODE_JUPYTER = 4.6.6
NODE_JUPYTER_INSTALL = /usr/bin/python3 -c 'import jupyterlab, boto3' 2>/dev/null || \
	/usr/bin/python3 -m pip install -q --break-system-packages 'jupyterlab==$(NODE_JUPYTER)' 'urllib3<2'
node-jupyter: cluster
	@$(NODE_JUPYTER_INSTALL)

# The SSH transport's tests start a real sshd; the dashboard's, Debian's
# Chromium (driven by Playwright's Python package, never `playwright install`);
# the install's, Debian's nginx and systemd-analyze; single sign-on's, a real
# OpenID Connect provider (node-oidc-provider, from npm, kept in
# $(OIDC_PROVIDER)). A policy-rc.d keeps the packages' own daemons from
# starting while they install.
# Each tool and the packages that bring it: only those missing are asked
# for (a machine whose Node.js comes from elsewhere, with its own npm, would
# have Debian's npm conflict with it).
TOOL_PACKAGES := sshd:openssh-server ssh-keygen:openssh-client chromium:chromium \
	nginx:NGINX openssl:openssl systemd-analyze:systemd npm:nodejs,npm
OIDC_PROVIDER := /var/cache/divergent/oidc-provider
test-tools:
	@for pair in $(TOOL_PACKAGES); do command -v $${pair%%:*} >/dev/null || \
		missing="$$missing $$(echo $${pair#*:} | tr , ' ')"; done; [ -z "$$missing" ] || ( \
		guard=; [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; guard=1; }; \
		apt-get update -qq && nginx=$$(apt-cache show nginx-light >/dev/null 2>&1 && echo nginx-light || echo nginx) && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			$${missing//NGINX/$$nginx} >/dev/null; \
		rc=$$?; [ -z "$$guard" ] || rm -f /usr/sbin/policy-rc.d; exit $$rc)
	@[ -d $(OIDC_PROVIDER)/node_modules/oidc-provider ] || (mkdir -p $(OIDC_PROVIDER) && \
		cd $(OIDC_PROVIDER) && npm install --no-audit --no-fund --silent oidc-provider@9.13.3)

# The venv, with the package and what the requirements file $(1) lists.
define venv_with
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r $(1) -e '.[server]'
endef

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	$(call venv_with,requirements-dev.txt)
	touch $@
