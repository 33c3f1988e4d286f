"""Every suite attack module, imported once so each registers its ``AttackSpec``.

Add one import line per attack module.
"""
