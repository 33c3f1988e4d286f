"""Every suite attack module, imported once so each registers its ``AttackSpec``.

Add one import line per attack module.
"""

import attacks.attributes  # noqa: F401
import attacks.cross_modal  # noqa: F401
import attacks.linkage  # noqa: F401
import attacks.matching  # noqa: F401
import attacks.membership  # noqa: F401
import attacks.metadata  # noqa: F401
import attacks.open_world  # noqa: F401
import attacks.profile  # noqa: F401
import attacks.property_aggregate  # noqa: F401
import attacks.property_passive  # noqa: F401
import attacks.reconstruction  # noqa: F401  (feature-inference, dlg, inverting-gradients)
import attacks.redteam  # noqa: F401
