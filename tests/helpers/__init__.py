"""Helpers shared by the tests, imported as ``tests.helpers.<module>``.

- `tests.helpers.go`: ASCII boards in GTP coordinates and a slow, obvious reference Go;
- `tests.helpers.mcts`: network-free evaluators (uniform, hashed, a score oracle), one-slot
  searches and from-scratch recounts of a search tree;
- `tests.helpers.numba`: numba's compile contract (nothing compiles at import, the on-disk
  cache serves a second process), checked in fresh processes;
- `tests.helpers.tmpfs`: a real full disk, a small tmpfs mounted over a folder (root only);
- ``tests/helpers/fake_gtp.py``: a GTP engine script that misbehaves on purpose (run as a
  subprocess, not imported).

Fixtures built on them live in the root ``tests/conftest.py``.
"""
