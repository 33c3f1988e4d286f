"""Device-side defenses (data-level transforms and update-level Flower Mods). None yet: see issue 4."""
