# Pretraining, Measured — the commands a reader, a learner and an instructor use.
# Everything runs inside .venv, created from the pinned requirements.txt on first use.
PY      := .venv/bin/python
VENV_OK := .venv/.installed
JB      := .venv/bin/jupyter-book
BOOK_FLAGS := --config book/_config.yml --toc book/_toc.yml
PASS_MARK ?= 60
SUBMISSIONS ?= exercises

NGPU ?= $(shell nvidia-smi -L 2>/dev/null | wc -l)

.PHONY: help venv book book-strict test test-notebooks screenshots lab grade exercises handout bench bench-grading gpu-check gpu-labs clean

help:
	@echo "make book   build the website into _build/html (works offline)"
	@echo "make test   the whole test suite: unit, notebooks (nbval), grader, book build, browser site test"
	@echo "make screenshots   every page of the built site at 1280 and 390 px, into build/test-artifacts/screenshots/"
	@echo "make lab    open JupyterLab on the course (labs, exercises, solutions)"
	@echo "make test-notebooks CPU=default   the notebooks under one CPU kernel path (default, avx2, avx512)"
	@echo "make book SOLUTIONS=0   the same site without the solutions pages (for a graded term)"
	@echo "make grade  grade a class: SUBMISSIONS=$(SUBMISSIONS) holds student folders and/or notebooks (PASS_MARK=$(PASS_MARK), JOBS_GRADE=one per core)"
	@echo "make handout DEST=../course-students   the students' course: no solutions/, tests/; README, Makefile, book for students"
	@echo "make bench  notebook run times, the measured-vs-theory ratios the book quotes, the time to grade 30 submissions"
	@echo "make gpu-check / gpu-labs   on an N-GPU box: NCCL all-reduce check and bandwidth; run every lab"

$(VENV_OK): requirements.txt requirements-nodeps.txt pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(VENV_OK)

venv: $(VENV_OK)

book: $(VENV_OK)
	$(JB) build . $(BOOK_FLAGS) --keep-going
	@echo "Open $(CURDIR)/_build/html/index.html in a browser (no network needed)."

book-strict: $(VENV_OK)
	$(JB) build . $(BOOK_FLAGS) -W -n --keep-going

exercises: $(VENV_OK)
	$(PY) -m course_lib.grading generate solutions exercises

# Three parts. (1) Everything except the few timing tests, on JOBS pytest-xdist workers, one test
# file (or notebook) per worker at a time: most tests wait on processes, browsers and kernels, so two
# workers keep two cores busy (a third was measured slower on 2 cores: 14:46 against 14:18 for the
# first part, the book building beside them). The notebooks (labs and worked answers) run in this same session, but
# their kernels compute on a second CPU kernel path (ATEN_CPU_CAPABILITY=avx2 on an AVX-512 machine,
# default elsewhere; the plugin course_lib.nbtools_pytest sets it for each notebook's kernel only),
# so a stored output that only this machine reproduces fails here instead of on a reader's or an
# instructor's machine; checking them under other kernels than this machine's is the stronger of
# the two checks (a machine with no second path runs them on its own). The notebooks whose checked
# outputs hold no float (nbtools.KERNEL_PATH_INDEPENDENT, each with its reason) keep this machine's
# kernels. (2) The unit tests that compare numbers computed two ways (split across ranks vs. whole,
# one optimizer vs. its reference: NUMERIC_TESTS) again, wholly under the second kernel path. (3)
# The tests marked `serial`, which compare wall-clock time with a tight bound, alone on a quiet machine.
JOBS ?= 2
# The Chinese twins (notebooks|solutions|exercises/zh) are never executed: their code cells and outputs
# equal the English notebook's byte for byte (tests/test_twins.py), which nbval checks here.
ZH_TWINS_IGNORE := --ignore=notebooks/zh --ignore=solutions/zh --ignore=exercises/zh
XDIST := -n $(JOBS) --dist loadfile --no-loadscope-reorder   # keep the order: unit tests, the book's tests and the labs in turn, worked answers (conftest)
SERIAL_FILES = $(shell grep -l 'mark.serial' tests/*.py)
NUMERIC_TESTS = tests/test_numerics.py tests/test_stability.py tests/test_tensor_parallel.py \
	tests/test_context_parallel.py tests/test_dp_components.py tests/test_dp_fsdp.py \
	tests/test_fsdp_components.py tests/test_zero_state.py tests/test_pipeline.py tests/test_moe.py
# The suite starts a few hundred Python processes: with PYTHONDONTWRITEBYTECODE set (as some
# containers do), each compiles course_lib again and every pytest process rewrites the asserts of all
# ~90 test modules again (4.7 of its 13 CPU-s of collection). make test writes the bytecode caches
# (__pycache__/, ignored by git) whatever that variable says.
test: export PYTHONDONTWRITEBYTECODE :=
test: $(VENV_OK)
	@second=$$($(PY) -m course_lib.nbtools second-path); \
	if [ -n "$$second" ]; then echo "notebooks' kernels under ATEN_CPU_CAPABILITY=$$second (another CPU's kernels)"; \
	else echo "torch runs its default kernels here; no second kernel path to try"; fi; \
	COURSE_NOTEBOOK_KERNEL_PATH=$$second $(PY) -m pytest -q --durations=15 $(XDIST) -p course_lib.nbtools_pytest \
	  -m "not serial" --nbval --nbval-current-env --ignore=tests/fixtures $(ZH_TWINS_IGNORE) tests notebooks solutions || exit $$?; \
	if [ -n "$$second" ]; then echo "numeric unit tests under ATEN_CPU_CAPABILITY=$$second"; \
	ATEN_CPU_CAPABILITY=$$second $(PY) -m pytest -q --durations=10 $(XDIST) -m "not serial" $(NUMERIC_TESTS) || exit $$?; fi
	$(PY) -m pytest -q -m serial $(SERIAL_FILES)

# Full-page screenshots of every page at both widths (build/test-artifacts/screenshots/), for a reviewer:
# the browser's per-page checks again on the site `make book-strict` built, taking pictures this time.
screenshots: book-strict
	COURSE_SCREENSHOTS=1 COURSE_BOOK_REUSE=1 $(PY) -m pytest -q $(XDIST) tests/test_site.py tests/test_site_zh.py \
	  tests/test_site_labs.py -k "page_works_offline or page_reads_well or search_works_offline"
	@echo "Screenshots in $(CURDIR)/build/test-artifacts/screenshots/"

# Check the notebooks under one kernel path: make test-notebooks CPU=default (or avx2, avx512).
test-notebooks: $(VENV_OK)
	ATEN_CPU_CAPABILITY=$(CPU) $(PY) -m pytest -q $(XDIST) --nbval --nbval-current-env $(ZH_TWINS_IGNORE) notebooks solutions

# JupyterLab on the whole course (notebooks/, exercises/, solutions/); as root (containers) it
# needs --allow-root. LAB_ARGS passes more flags, e.g. LAB_ARGS="--no-browser --port 8899".
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
lab: $(VENV_OK)
	.venv/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" $(LAB_ROOT_FLAG) $(LAB_ARGS)

# make itself exits 2 whenever a recipe fails; the line below names the grader's own status
# (1: a notebook below the pass mark, 2: usage error, 3: the grader failed). CI should call the grader directly.
# SUBMISSIONS is a class folder: one folder per student and/or flat notebooks; JOBS_GRADE notebooks
# are graded at once (0: one per core). Reports, gradebook.csv included, go to GRADES (build/grades).
# MASTERS, the graded masters, flags submissions that copy their solution blocks (--solutions;
# MASTERS= turns the check off). Not SOLUTIONS: that one is `make book SOLUTIONS=0`.
JOBS_GRADE ?= 0
GRADES ?= build/grades
MASTERS ?= solutions
grade: $(VENV_OK)
	@$(PY) -m course_lib.grading grade "$(SUBMISSIONS)" --out "$(GRADES)" --pass-mark $(PASS_MARK) --jobs $(JOBS_GRADE) \
	  $(if $(MASTERS),--solutions "$(MASTERS)",); rc=$$?; \
	  case $$rc in 0) ;; 1) echo "grader exit status 1 (a notebook is below the pass mark)";; \
	    2) echo "grader exit status 2 (usage error)";; *) echo "grader exit status $$rc (the grader or its sandbox failed, not a student)";; esac; \
	  exit $$rc

gpu-check: $(VENV_OK)
	@test "$(NGPU)" -gt 0 || (echo "no CUDA device found (nvidia-smi -L lists none)"; exit 1)
	.venv/bin/torchrun --nproc-per-node=$(NGPU) -m course_lib.dist course_lib.dist_check:allreduce_check
	.venv/bin/torchrun --nproc-per-node=$(NGPU) -m course_lib.dist course_lib.dist_check:allreduce_bandwidth

gpu-labs: $(VENV_OK)
	mkdir -p build/gpu-labs
	.venv/bin/jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=1200 \
		--output-dir build/gpu-labs notebooks/*.ipynb

bench: $(VENV_OK)
	$(PY) -m course_lib.bench

# only the time to grade a class of 30 submissions (written to build/bench-grading.json)
bench-grading: $(VENV_OK)
	$(PY) -m course_lib.bench --only grading --out build/bench-grading.json

# the students' course for a graded term (docs/GRADING.md, "Where the masters live")
DEST ?= ../course-students
handout: $(VENV_OK)
	$(PY) -m course_lib.grading handout $(DEST)

clean:
	rm -rf _build build
