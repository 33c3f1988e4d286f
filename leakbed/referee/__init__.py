"""The referee: the only room that holds ground truth.

``referee.seal`` is the only part the server may use (the shuffler files each update's owner there); everything
else (the truth store, leakbed's scorer kinds, the analyses that join outputs with owners) reads the truth back.
The referee runs no plugin code: it knows an attack only by its declaration (data), scores its outputs (hostile
data, checked against the kind's schema, covering every update the attack was given) with its own scorer kinds,
and hands a plugin's own scorer to the scoring sandbox. It imports ``core`` and ``workers`` only, never ``attacks``;
its folder is never handed to the attack side.
"""
