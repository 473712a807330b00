"""Batched Monte Carlo tree search (Silver et al. 2017, Methods "Search algorithm").

The public face is `BatchedMCTS` (`tabula.mcts.search` explains the search); the rest of the
package is its numba side:

- ``trees``: the struct-of-arrays trees and the leaf buffers;
- ``kernels``: selection, expansion and backup;
- ``gumbel``: the Gumbel search's root schedule, selection and policy target;
- ``moves``: the per-move work between searches (root statistics, move choice, play);
- ``reuse``: re-rooting a tree at the played child;
- ``random``: the per-game SplitMix64 streams;
- ``utility``: what the search values a position by, its value and a share of its score
  (``search.score_utility``), for the evaluator's leaves and the kernels' finished games.
"""

from tabula.mcts.search import (
    BatchedMCTS,
    Decisions,
    Evaluate,
    Games,
    Roots,
    RootStats,
    SearchError,
    SearchParams,
    evaluate_in_chunks,
)

__all__ = [
    "BatchedMCTS",
    "Decisions",
    "Evaluate",
    "Games",
    "RootStats",
    "Roots",
    "SearchError",
    "SearchParams",
    "evaluate_in_chunks",
]
