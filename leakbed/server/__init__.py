"""The Flower ServerApp: curious strategy, shuffler, referee."""
