"""Shared pytest set-up. Keep each concern in its own function."""


def _register_markers(config):
    # slow: the transformers model tests; still run by default (deselect with -m "not slow")
    config.addinivalue_line("markers", "slow: slow test (transformers models); runs by default")


def pytest_configure(config):
    _register_markers(config)
