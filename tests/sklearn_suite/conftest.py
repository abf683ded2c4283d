"""Marks scikit-learn's tests that dqkm does not pass (see test_sklearn_k_means.EXPECTED)."""


def pytest_collection_modifyitems(config, items):
    from . import test_sklearn_k_means as suite

    suite.pytest_collection_modifyitems_hook(
        [i for i in items if i.module is suite])
