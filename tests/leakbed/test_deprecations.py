"""No deprecated Flower API on any path: Flower logs its deprecation notices, leakbed raises them as
``FlowerDeprecationWarning``, and pyproject.toml's filterwarnings makes that an error in every test."""

import pytest
from flwr.supercore.logger import warn_deprecated_feature

from leakbed.deprecations import FlowerDeprecationWarning, reemit


def test_a_deprecation_flower_logs_in_this_process_fails_the_test():
    with pytest.raises(FlowerDeprecationWarning, match="`run_simulation` is deprecated"):
        warn_deprecated_feature("`run_simulation` is deprecated")


def test_a_deprecation_in_a_simulation_runtimes_log_is_raised_here():
    log = (
        "INFO :      Starting Flower Simulation\n"
        "WARNING :   DEPRECATED FEATURE: `Message.create_reply` is deprecated.\n"
        "            This is a deprecated feature. It will be removed\n"
    )
    with pytest.raises(FlowerDeprecationWarning, match="in the simulation: `Message.create_reply` is deprecated."):
        reemit(log)
    assert reemit("INFO :      nothing deprecated here\n") == []
