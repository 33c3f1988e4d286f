"""leakbed-hostile: attack code written to break leakbed's boundary, one attack per route (``tests/redteam``).

Each attack is what a hostile researcher could publish: a package of its own, installed with pip, found by entry
point, importing leakbed only from ``leakbed.plugin``. It tries its route as hard as an attacker would and reports
what it found in an extra output array, ``evidence`` (JSON), beside a closed-world ranking (kind ``reid``) in
which every owner it found is named with certainty and every other update is ranked at random: a route that
leaks shows as evidence and as a score above chance.

This module runs nothing at import: the import-time probe lives in ``leakbed_hostile.importtime`` alone.
"""
