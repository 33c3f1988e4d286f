"""Hostile attacks aimed at the sandbox's allowlist and at other sandboxes (leakbed's red team)."""
