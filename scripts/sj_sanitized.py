"""pytest plugin for `make asan` (loaded with -p before any conftest): imports shapejit
now, so nothing later on sys.path can swap in the unsanitized in-place build, checks that
its _C is the sanitized one in $SHAPEJIT_EXPECT_C_DIR, and shows the path in the header."""
import os

import pytest

import shapejit._C

_C_FILE = os.path.realpath(shapejit._C.__file__)


def pytest_report_header(config):
    return "shapejit._C: %s" % _C_FILE


def pytest_configure(config):
    want = os.environ.get("SHAPEJIT_EXPECT_C_DIR")
    if want and os.path.dirname(_C_FILE) != os.path.realpath(want):
        pytest.exit("sanitizer run: the tests imported %s, not the sanitized _C in %s"
                    % (_C_FILE, want), returncode=3)


def pytest_sessionstart(session):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # shown even under -q
        reporter.write_line("[asan] testing shapejit._C from %s" % _C_FILE)
