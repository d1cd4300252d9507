# kvmath: the book, its tests and its live notebooks.
#
#   make book     build the book into _build/html (renders with no network)
#   make test     every test: unit + doctests, notebooks (nbval), the book
#                 build, and a headless-browser check of every page
#   make test-full  make test plus the slow checks (the learner build, every
#                 page's live figures in the browser, every notebook run in
#                 the workshop's JupyterLite)
#   make runtime  vendor the in-browser Python (Pyodide, numpy, matplotlib)
#   make lab      JupyterLab on copies of the chapters (_build/lab/) linked to the built book
#   make pdf      print the built book as one PDF (_build/html/kvmath-book.pdf): contents,
#                 bookmarks, page numbers, links inside the PDF
#   make refresh  re-execute every notebook in place (low-churn metadata), then store each
#                 Markdown cell's inline-expression results for JupyterLab (kvbook.inline)
#   make workshop the workshop kit in _build/workshop/, two folders: learner/ (the only
#                 one to serve or copy: learner book, live notebooks, handout, PDF)
#                 and instructor/ (instructor book, answer key, PDF)
#   make handout  the two-page A4 handout, _build/workshop/learner/handout.pdf
#   make lite     the notebooks live in the browser (JupyterLite), _build/workshop/learner/lite
#
# Each target sets up what it needs: a virtual environment in .venv from the
# pinned requirements.txt (re-made when that file changes), kvmath and the
# book's own package kvbook (packages/kvbook/: figures, tables, Sphinx extensions, the
# workshop tools, run as `python -m kvbook...`) installed into it in editable
# mode, the browser assets from npm (package-lock.json) and
# the in-browser Python runtime (make runtime: Pyodide from npm, its numpy and
# matplotlib wheels checked against Pyodide's own lock; .cache/, outside git).
# Every folder a target creates ($(VENV), $(LITE_VENV), node_modules/, .cache/, _build/)
# is in _config.yml's exclude_patterns, so any target may run after any other, in
# any order, in one checkout (tests/book/test_kit.py checks it).

SHELL       := /bin/bash
PYTHON      ?= python3
VENV        ?= .venv
VPY         := $(VENV)/bin/python
PY_STAMP    := $(VENV)/.kvmath-installed
UV          := uv==0.13.9
NODE_STAMP  := node_modules/.kvmath-installed
HTML        := _build/html
JB_FLAGS    := -W -n --keep-going
CHROMIUM    ?= /usr/bin/chromium
# pytest-xdist: one worker per core; --dist loadfile keeps each file (a notebook's cells, nbval) on one worker.
# PYTEST_JOBS= runs the tests in one process. test-full stays in one process: its slow tests rebuild
# _build/ (the learner build, the kit) while others would read it.
PYTEST_JOBS ?= -n auto --dist loadfile
WORKSHOP    := _build/workshop
WSRC        := _build/workshop-src

.PHONY: book test test-full lab refresh env assets runtime chromium poppler pdf clean help handout learner instructor answer-key workshop teaching-pages lite lite-env
.DEFAULT_GOAL := help

help:
	@echo "make book     build the book into $(HTML) (offline-ready)"
	@echo "make test     run every test (sets everything up first)"
	@echo "make test-full  make test, plus the slow checks (the workshop kit, a fresh clone's targets in turn)"
	@echo "make pdf      print the built book to one PDF with headless Chromium"
	@echo "make lab      run the notebooks live in JupyterLab"
	@echo "make refresh  re-execute notebooks/*.ipynb in place"
	@echo "make workshop the kit in $(WORKSHOP): learner/ (serve only this) and instructor/"
	@echo "make handout  the two-page A4 handout PDF"

# --- tools ------------------------------------------------------------------
define need
@command -v $(1) >/dev/null 2>&1 || { echo "make: '$(1)' not found: $(2)"; exit 1; }
endef

# --- Python environment -----------------------------------------------------
$(PY_STAMP): requirements.txt pyproject.toml packages/kvbook/pyproject.toml
	$(call need,$(PYTHON),install Python 3.10 or newer with venv (Debian: apt-get install python3 python3-venv))
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "make: $(PYTHON) is older than 3.10: install Python 3.10 or newer"; exit 1; }
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV) || { echo "make: could not create $(VENV): install the venv module (Debian: apt-get install python3-venv)"; exit 1; }
	@# uv installs the pinned set in seconds where pip takes minutes (most of a fresh clone's set-up);
	@# where uv cannot reach an index, pip does the same from its own configuration
	@$(VPY) -m pip install --disable-pip-version-check -q $(UV) && \
	  $(VPY) -m uv pip install --python $(VPY) -q -r requirements.txt || \
	  $(VPY) -m pip install --disable-pip-version-check -q -r requirements.txt
	$(VPY) -m pip install --disable-pip-version-check -q --no-deps -e .
	$(VPY) -m pip install --disable-pip-version-check -q --no-deps -e packages/kvbook
	@touch $@

env: $(PY_STAMP)

# --- browser assets (MathJax, Pyodide's core) ---------------------------------
# npm's own output on a failure is a stack trace: scripts/npm_ci.sh says in one line what it could not
# fetch, and keeps npm's log in .cache/npm-ci.log.
$(NODE_STAMP): package.json package-lock.json scripts/npm_ci.sh
	$(call need,npm,install Node.js with npm (Debian: apt-get install npm))
	@sh scripts/npm_ci.sh
	@touch $@

assets: $(NODE_STAMP)

# --- the in-browser runtime (every figure control live in the published book) ---
# Pyodide's core from npm and numpy + matplotlib wheels, each checked against the
# sha256 in Pyodide's official pyodide-lock.json (packages/kvbook/kvbook/live/vendor_pyodide.py).
RUNTIME_STAMP := .cache/pyodide-0.27.7/kvmath-runtime.json
$(RUNTIME_STAMP): requirements-pyodide.txt package-lock.json packages/kvbook/kvbook/live/vendor_pyodide.py $(NODE_STAMP) $(PY_STAMP)
	@$(VPY) -m kvbook.live.vendor_pyodide

runtime: env assets $(RUNTIME_STAMP)

# --- the book ----------------------------------------------------------------
# Always a clean build of every page: the notebooks are re-executed, so the
# numbers in the book are those of the kvmath in this tree. Without the in-browser
# runtime the build stops (a book whose figure controls are not live is not the book).
book: env assets runtime
	@start=$$(date +%s); rm -rf $(HTML); \
	$(VENV)/bin/jupyter-book build . --all $(JB_FLAGS) || exit $$?; \
	echo; echo "Built in $$(( $$(date +%s) - start )) s. Open it with no network at all:"; \
	echo "  file://$(CURDIR)/$(HTML)/index.html   (figures: build-time frames only)"; \
	echo "or serve it, to make every figure control live (browsers run WebAssembly over HTTP only):"; \
	echo "  cd $(HTML) && python3 -m http.server 8000   (then http://localhost:8000)"; \
	echo "Run the notebooks live:  make lab"

# --- tests -------------------------------------------------------------------
chromium:
	@if [ ! -x "$(CHROMIUM)" ]; then \
	  command -v apt-get >/dev/null 2>&1 || { echo "make: $(CHROMIUM) not found and no apt-get: install Chromium (Debian package 'chromium')"; exit 1; }; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  echo "Installing Chromium for the browser test ($$SUDO apt-get install chromium)"; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi
	@test -x "$(CHROMIUM)" || { echo "make: Chromium is still missing at $(CHROMIUM)"; exit 1; }

# poppler-utils: pdftotext/pdftoppm/pdfimages let the tests read the PDFs (the book's, the handout).
poppler:
	@if ! command -v pdftoppm >/dev/null 2>&1 || ! command -v pdftotext >/dev/null 2>&1; then \
	  command -v apt-get >/dev/null 2>&1 || { echo "make: pdftoppm not found and no apt-get: install poppler-utils"; exit 1; }; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  echo "Installing poppler-utils for the PDF tests ($$SUDO apt-get install poppler-utils)"; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq poppler-utils >/dev/null; \
	fi
	@command -v pdftoppm >/dev/null 2>&1 || { echo "make: poppler-utils is still missing"; exit 1; }

# The whole book as one PDF: its pages joined into one document (title page, contents,
# part openers, links inside the PDF), printed by the same headless Chromium the tests use
# (print stylesheets: _static/kvmath.css, scripts/make_pdf.css), then bookmarks and page
# labels with pypdf (scripts/make_pdf.py). Builds the book first.
pdf: env assets chromium book
	$(VPY) scripts/make_pdf.py $(HTML)

# The tests marked slow (pytest.ini) are left out: each takes over about 30 s, or repeats for every
# chapter a check this target runs on a few (the layout of every figure frame).
# The browser tests run and must find Chromium (they fail without it).
test: env assets runtime chromium poppler book
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) -m pytest -m "not slow" $(PYTEST_JOBS)

# Everything `make test` runs, plus the tests marked slow: the PDF, the live
# figures of every page, the JupyterLite site (one chapter, then every chapter),
# the workshop kit (make workshop: the learner and instructor builds, a second and
# third execution of every notebook, and their PDFs) and its tests that no solution,
# answer key or instructor page is in the learner folder, make workshop, book and pdf
# in turn in a fresh clone, every pair of figure controls, and the blitted figures'
# pixels against full redraws.
test-full: env assets runtime chromium poppler book workshop
	$(VPY) scripts/make_pdf.py $(HTML)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) -m pytest

# --- the workshop kit (book/teaching.md) ---------------------------------------
# The plan, misconception and problem pages are generated from book/teaching/*.yaml.
teaching-pages: env
	$(VPY) -m kvbook.workshop.workshop_pages

handout: env chromium
	$(VPY) -m kvbook.workshop.handout --html $(WSRC)/handout.html --pdf $(WORKSHOP)/learner/handout.pdf
	@echo "Handout: $(WORKSHOP)/learner/handout.pdf"

# Copies of the sources, transformed (solutions removed / facilitator notes
# added), executed and built like `make book` (warnings are errors).
learner: env assets
	$(VPY) -m kvbook.workshop.workshop_build learner

instructor: env assets
	$(VPY) -m kvbook.workshop.workshop_build instructor

# The notebooks live in the browser: a JupyterLite site in $(WORKSHOP)/lite, built with
# its own pinned environment (.venv-lite from requirements-lite.txt, apart from the
# book's), the same vendored Pyodide plus the kernel's own wheels, each checked against
# the official lock (packages/kvbook/kvbook/workshop/workshop_lite.py; it fails unless every URL is local).
LITE_VENV  ?= .venv-lite
LITE_STAMP := $(LITE_VENV)/.kvmath-lite-installed
$(LITE_STAMP): requirements-lite.txt
	@test -x $(LITE_VENV)/bin/python || $(PYTHON) -m venv $(LITE_VENV) || { echo "make: could not create $(LITE_VENV)"; exit 1; }
	$(LITE_VENV)/bin/python -m pip install --disable-pip-version-check -q -r requirements-lite.txt
	@touch $@

lite-env: $(LITE_STAMP)

lite: env assets runtime lite-env learner
	$(VPY) -m kvbook.workshop.workshop_lite --lite-venv $(LITE_VENV)

# From the answers the notebooks' solutions record (their answer_values metadata, filled
# by make refresh), each exercise named as the instructor build numbers it ("Exercise 2.4").
# Into the instructor's folder only.
answer-key: env instructor
	$(VPY) -m kvbook.workshop.answer_key --out $(WORKSHOP)/instructor/answer-key.md --json $(WORKSHOP)/instructor/answer-key.json

# The kit: learner/ (the only folder to serve or copy) and instructor/, each with its
# book printed to a PDF beside it (packages/kvbook/kvbook/workshop/kit.py). It reads
# neither _build/html nor its PDF: `make book` / `make pdf` before or after leave both.
workshop: env assets chromium learner instructor handout answer-key lite
	$(VPY) -m kvbook.workshop.kit

# --- live notebooks ------------------------------------------------------------
# The chapters' copies in _build/lab/notebooks/, their references and citations linked to the built book, which the
# server serves at /book/ (packages/kvbook/kvbook/lab.py); the book is built first if there is none.
lab: env
	@[ -f $(HTML)/index.html ] || $(MAKE) book
	$(VPY) -m kvbook.lab
	@ROOT=; [ "$$(id -u)" = 0 ] && ROOT=--allow-root; \
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=_build/lab/notebooks \
	  --ServerApp.jpserver_extensions=kvbook.lab=True $$ROOT

# SMALL=1: commit no images or interactive frames (the build makes them again).
refresh: env
	$(VPY) scripts/refresh_notebooks.py $(if $(SMALL),--small) notebooks/*.ipynb
	$(VPY) -m kvbook.inline notebooks/*.ipynb

clean:
	rm -rf _build .pytest_cache
