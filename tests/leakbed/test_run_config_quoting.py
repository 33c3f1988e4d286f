"""``flwr run --run-config`` takes no escaped quote: each value is quoted with the quote it does not hold, and a
value holding both is refused in one line instead of reaching flwr as a string it cannot parse."""

from __future__ import annotations

import pytest

from leakbed.flower import toml_string


def test_each_value_takes_the_quote_it_does_not_hold() -> None:
    assert toml_string('split.priors=["random"] fl.rounds=1') == """'split.priors=["random"] fl.rounds=1'"""
    assert toml_string("attack.suite=['knn']") == '''"attack.suite=['knn']"'''


def test_a_value_with_both_quotes_is_refused() -> None:
    with pytest.raises(ValueError, match="both quote kinds"):
        toml_string("""attack.suite=['knn'] split.priors=["random"]""")
