"""The docs site's reference pages, generated from the code that defines what they describe (never typed twice)."""
