"""tabula: the pure core of AlphaGo Zero (rules, search, self-play loop, Elo, GTP, config).

No file or network I/O, no torch: see DESIGN.md for the layering.
"""
