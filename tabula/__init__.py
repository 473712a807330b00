"""tabula: the pure core of AlphaGo Zero (rules, search, self-play loop, Elo, GTP, config).

No file or network I/O, no torch: see docs/design.md for the layering.
"""
