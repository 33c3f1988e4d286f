"""The referee: the only room that holds ground truth.

``referee.seal`` is the only part the server may use (the shuffler files each update's owner
there); everything else (the truth store, each attack's scorer, the analyses that join
predictions with owners) reads the truth back. The referee may import ``attacks`` (to refit or
score), never the reverse; its folder is never handed to the attack side.
"""
