"""leakbed's shared ground: config, per-user data, models, local training, the update store."""
