"""The root of the tests (a package: ``tests/__init__.py``), loaded before every directory's own
conftest. Being here puts the repository root on ``sys.path``, so every test imports shared
code the same way, whatever its directory:

- ``tests.helpers.go`` / ``tests.helpers.mcts``: board diagrams, the reference Go, and the
  network-free evaluators and tree recounts of the search tests (`tests.helpers`);
- ``bench.playout``: the benchmarks' incremental engine, which its tests check.

Fixtures used by one layer stay in that layer's conftest (``tests/model``, ``tests/eval``,
``tests/flows``, ``tests/e2e``); fixtures shared across layers belong here.
"""
