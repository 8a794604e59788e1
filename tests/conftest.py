"""Shared pytest set-up. Keep each concern in its own function."""
import pytest


def _register_markers(config):
    # slow: the transformers model tests; still run by default (deselect with -m "not slow")
    config.addinivalue_line("markers", "slow: slow test (transformers models); runs by default")


def pytest_configure(config):
    _register_markers(config)


@pytest.fixture
def fresh_shapejit():
    """A fresh shapejit around a test: no compiled code, default logs."""
    import shapejit
    shapejit.reset()
    yield shapejit
    shapejit.reset()
    shapejit.set_logs()


@pytest.fixture
def fresh_compilers():
    """Fresh shapejit and torch.compile (dynamo) caches around a test that compares them."""
    import torch._dynamo

    import shapejit
    torch._dynamo.reset()
    shapejit.reset()
    yield
    torch._dynamo.reset()
    shapejit.reset()


@pytest.fixture(params=[1, 2])
def threads(request):
    """The cpu backend's thread count (shapejit.config.threads), 1 and 2."""
    import shapejit
    with shapejit.config.patch(threads=request.param):
        yield request.param
