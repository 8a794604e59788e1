# shapejit developer targets.
#   make build   build shapejit._C in place (python3 setup.py build_ext --inplace)
#   make test    build, then run the test suite
#   make asan    build an AddressSanitizer + UBSan _C into build/asan/shapejit/ (next to
#                links to the Python package files) and run the whole suite against it
#   make zoo     build, then run every model of the transformers model zoo
#                (tests/e2e/test_model_zoo.py with SJ_ZOO=full; the default run takes half)
#   make coverage  build, then trace the torch callables of 55 transformers architectures
#                (tools/torch_call_coverage.py --trace --explain --write: minutes) into
#                tools/torch_calls.json and docs/torch_call_coverage.md; after a change to
#                vocab/callables.def, `python3 tools/torch_call_coverage.py --write` alone
#                refreshes the document (tests/vocab/test_call_coverage.py checks it is in step)
#   make bench   build, then run the benchmark suite's core set (bench/suite.py; BENCH_ARGS=--quick
#                etc.); table and plots in bench/results/suite/
#   make bench-zoo  build, then the suite's zoo set (transformers architectures at two sizes)
#                --quick under eager, Inductor and shapejit cpu (about 10 min; BENCH_ARGS adds
#                or overrides options); table and plots in bench/results/suite_zoo/
#   make fuzz-py      differential fuzz of Python constructs (tests/e2e/pyfuzz): FUZZ_COUNT programs
#                     (50000) from FUZZ_SEED (0), each chunk in a child process; crashes counted
#   make fuzz-breaks  the graph-break fuzz test at FUZZ_BREAKS programs (2000; CI runs 150)
#   make test-avx2-emu  build, then run the backend and compile-and-load tests under qemu-user
#                emulating an AVX2 CPU without AVX-512 (scripts/run-avx2-emu: installs
#                qemu-user when root, checks the emulated CPU, fresh kernel cache; tests
#                in scripts/avx2-emu-deselect.txt left out); about 20 min on 2 cores
#   make clean   remove build products
PYTHON ?= python3
PYTEST_ARGS ?=
BENCH_ARGS ?=
FUZZ_SEED ?= 0
FUZZ_COUNT ?= 50000
FUZZ_BREAKS ?= 2000
# what `make test-avx2-emu` runs under emulation; test_kernel_vectorize.py only compiles
AVX2_EMU_TESTS ?= tests/backend tests/native --ignore=tests/backend/test_kernel_vectorize.py
PYTEST := $(PYTHON) -m pytest -q -ra -p no:cacheprovider

ASAN_DIR := build/asan
ASAN_TMP := build/asan-obj
LIBASAN := $(shell gcc -print-file-name=libasan.so)
LIBUBSAN := $(shell gcc -print-file-name=libubsan.so)
ASAN_ENV := LD_PRELOAD="$(LIBASAN) $(LIBUBSAN)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_odr_violation=0:strict_init_order=1:print_summary=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	PYTHONPATH="$(CURDIR)/$(ASAN_DIR):$(CURDIR)/scripts" \
	PYTHONSAFEPATH=1 \
	SHAPEJIT_EXPECT_C_DIR="$(CURDIR)/$(ASAN_DIR)/shapejit"

.PHONY: build test test-avx2-emu zoo coverage bench bench-zoo asan asan-build clean fuzz-py fuzz-breaks

build:
	$(PYTHON) setup.py -q build_ext --inplace

# exit status 5 = no tests collected: not a failure
test: build
	$(PYTEST) tests $(PYTEST_ARGS); rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

test-avx2-emu: build
	scripts/run-avx2-emu $(AVX2_EMU_TESTS) $(PYTEST_ARGS)

zoo: build
	SJ_ZOO=full $(PYTEST) tests/e2e/test_model_zoo.py $(PYTEST_ARGS)

coverage: build
	$(PYTHON) tools/torch_call_coverage.py --trace --explain --write

fuzz-py: build
	$(PYTHON) tests/e2e/pyfuzz/run.py --seed $(FUZZ_SEED) --count $(FUZZ_COUNT)

fuzz-breaks: build
	SHAPEJIT_BREAK_FUZZ_COUNT=$(FUZZ_BREAKS) $(PYTEST) tests/e2e/test_break_fuzz.py

bench: build
	$(PYTHON) bench/suite.py $(BENCH_ARGS)

bench-zoo: build
	$(PYTHON) bench/suite.py --set zoo --quick --systems eager,tc,sj_cpu $(BENCH_ARGS)

asan-build:
	SHAPEJIT_SANITIZE=1 $(PYTHON) setup.py -q build_ext --build-lib $(ASAN_DIR) --build-temp $(ASAN_TMP)
	@# link every package file but the extension; drop links to files that are gone
	@find $(ASAN_DIR)/shapejit -maxdepth 1 -xtype l -delete
	@for f in shapejit/*; do case "$$f" in *.so|*/__pycache__) ;; \
	  *) ln -sfn "$(CURDIR)/$$f" "$(ASAN_DIR)/$$f" ;; esac; done
	@test -e "$(LIBASAN)" -a -e "$(LIBUBSAN)" || { echo "gcc's libasan/libubsan not found"; exit 1; }

# PYTHONSAFEPATH keeps the working directory (and its in-place, unsanitized _C) off
# sys.path; the pytest plugin scripts/sj_sanitized.py imports shapejit before any
# conftest can change sys.path, prints which _C it got, and stops the run unless that is
# the sanitized one in $(ASAN_DIR).
asan: asan-build
	$(ASAN_ENV) $(PYTEST) -p sj_sanitized tests $(PYTEST_ARGS); \
	rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

clean:
	rm -rf build/lib.* build/temp.* build/bdist.* $(ASAN_DIR) $(ASAN_TMP) *.egg-info
	rm -f shapejit/_C*.so
