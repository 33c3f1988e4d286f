"""The views the linkage attack links anonymous updates by (``attacks.linkage``), each filed as ``pairs_<view>`` and
``labels_<view>`` in its outputs and scored apart by the referee."""

from __future__ import annotations

VARIANTS = ("meta", "w", "both")  # metadata alone, Δw alone, both distances summed
