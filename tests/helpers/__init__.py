"""Helpers shared by the tests, imported as ``tests.helpers.<module>``.

- `tests.helpers.go`: ASCII boards in GTP coordinates and a slow, obvious reference Go;
- `tests.helpers.mcts`: network-free evaluators (uniform, hashed, a score oracle), one-slot
  searches and from-scratch recounts of a search tree.

Fixtures built on them live in the root ``tests/conftest.py``.
"""
