"""An example leakbed plugin package: the ``bias-labels`` attack and the ``hide-bias`` defense."""
