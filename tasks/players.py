"""Player specs -> player objects, for the arena, gating and the `tabula gtp` server.

One spec string names a player everywhere (CLI, config, pipeline)::

    random                 uniform among legal moves, never filling its own single-point eyes
                           (`tabula.players.RandomPlayer`)
    raw:PATH               the raw network: argmax of p over legal moves, no search (the
                           paper's "raw network" player)
    mcts:PATH[@SIMS]       network + MCTS, tau -> 0, no Dirichlet noise; SIMS simulations per
                           move (default: `simulations` argument, else evaluation.simulations)
    PATH[@SIMS]            a bare checkpoint path: the same as mcts:PATH[@SIMS]
    gtp:COMMAND LINE       any GTP engine as a subprocess, e.g. "gtp:gnugo --mode gtp --level 1";
                           gnugo and pachi are found in /usr/games when not on PATH
    models:/NAME@ALIAS     a registered model (e.g. models:/tabula-quickstart@champion), resolved
                           to a checkpoint by the pipeline's `resolver`; allowed after raw:, mcts:

PATH is a checkpoint written by `model.checkpoint.save_checkpoint`, for the configured board size.

GnuGo under our rules: "gtp:gnugo " + `tabula.ladder.GNUGO_FLAGS` + " --level N" (the ladder's
``gnugo-lN`` anchors). Without --capture-all-dead it passes with the opponent's dead stones
still on the board, which Tromp-Taylor scoring counts for their owner (it then loses won games).

Every player has a `name` for the results store and the SGF records: "random"; for GTP engines
the program name plus its level ("gnugo-l1"); for checkpoints the metadata's model_id or the
file's stem, with ":raw" for the raw network and "@SIMS" when the simulations differ from
evaluation.simulations. Every player implements both `tabula.gtp.Player` (``genmove(game,
color)``, for the GTP server) and `tabula.arena.ArenaPlayer` (batched, per-slot games): the
random player is `tabula.players.RandomPlayer` in a `tabula.players.SequentialPlayer`, network
players come from `tabula.players` (built here from a checkpoint), GTP engines from
`tasks.engines`.

Bad specs raise PlayerSpecError (a TabulaError: the CLI prints one line and exits 2).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tabula.config import Config
from tabula.errors import TabulaError
from tabula.players import (
    MctsPlayer,
    RandomPlayer,
    RawNetworkPlayer,
    SequentialPlayer,
    genmove_leaves,
)
from tasks.engines import GtpPlayer

GAME_DIRS = ("/usr/games", "/usr/local/games")  # Debian installs gnugo and pachi here


def network_player(
    kind: str,
    checkpoint: Path,
    cfg: Config,
    simulations: int,
    seed: int,
    precision: str = "auto",
    leaves_per_move: int | None = None,
) -> RawNetworkPlayer | MctsPlayer:
    """A raw ("raw") or searching ("mcts") player for a checkpoint of cfg's board size.

    Its name is the checkpoint's model_id (else the file's stem), with ":raw" for the raw
    network and "@SIMS" when simulations differ from evaluation.simulations. ``precision``:
    the evaluator's (`model.evaluator.Evaluator`); ``leaves_per_move``: the leaves one game's
    search evaluates at once in `MctsPlayer.genmove` (None: `tabula.players.genmove_leaves`).
    """
    from model.checkpoint import load_checkpoint
    from model.evaluator import Evaluator  # torch is imported only when a network plays

    net, metadata = load_checkpoint(checkpoint, expect_board_size=cfg.rules.board_size)
    stem = str(metadata.get("model_id") or checkpoint.stem)
    search = cfg.search
    if not net.aux:  # no score head: the search values its finished games by the result too
        search = search.model_copy(update={"score_utility": 0.0})
        cfg = cfg.model_copy(update={"search": search})
    batch = leaves_per_move or genmove_leaves(simulations, search)
    evaluator = Evaluator.for_search(net, search, precision=precision, batch=batch)
    if kind == "raw":
        return RawNetworkPlayer(evaluator, f"{stem}:raw", seed)
    name = stem if simulations == cfg.evaluation.simulations else f"{stem}@{simulations}"
    return MctsPlayer(evaluator, cfg, simulations, name, seed, batch)  # the leaves it was sized for


class PlayerSpecError(TabulaError):
    """A player spec that cannot be turned into a player; the message is one line."""


Resolver = Callable[[str], str | os.PathLike[str]]
"""Maps "models:/NAME@ALIAS" to a local checkpoint path (the pipeline passes one)."""

_SIMS = re.compile(r"^(?P<path>.+)@(?P<sims>[0-9]+)$")


def make_player(
    spec: str,
    cfg: Config,
    simulations: int | None = None,
    seed: int = 0,
    resolver: Resolver | None = None,
    precision: str = "auto",
    leaves_per_move: int | None = None,
) -> Any:
    """The player named by `spec` (grammar in the module docstring) for cfg's board and komi.

    simulations: MCTS simulations when the spec gives none (``@SIMS`` in the spec wins);
    None means cfg.evaluation.simulations. seed: the player's randomness (random moves, the
    evaluator's dihedral transforms, MCTS tie breaks, a GTP engine's random seed). resolver:
    turns models:/ URIs into checkpoint paths. precision, leaves_per_move: a network
    player's (`network_player`). Raises PlayerSpecError (and the checkpoint loader's
    CheckpointError).
    """
    spec = spec.strip()
    if not spec:
        raise PlayerSpecError("empty player spec (use random, raw:PATH, mcts:PATH, gtp:COMMAND)")
    if spec == "random":
        return SequentialPlayer(RandomPlayer(seed), name="random")
    if spec.startswith("gtp:"):
        argv = resolve_command(spec[4:])
        timeout_s = cfg.evaluation.match_timeout_s
        return GtpPlayer(argv, cfg.rules.board_size, cfg.rules.komi, timeout_s, seed=seed)
    kind, rest = "mcts", spec
    for prefix in ("raw:", "mcts:"):
        if spec.startswith(prefix):
            kind, rest = prefix[:-1], spec[len(prefix) :]
    path, sims = _split_simulations(spec, rest, kind)
    checkpoint = _checkpoint_path(spec, path, resolver)
    default_sims = simulations if simulations is not None else cfg.evaluation.simulations
    return network_player(
        kind, checkpoint, cfg, sims or default_sims, seed, precision, leaves_per_move
    )


def checkpoint_of(spec: str, resolver: Resolver | None = None) -> Path | None:
    """The checkpoint a network player's spec names (`make_player`'s reading of it, models:/
    resolved), None for the random player and GTP engines."""
    spec = spec.strip()
    if spec in ("", "random") or spec.startswith("gtp:"):
        return None
    kind, rest = "mcts", spec
    for prefix in ("raw:", "mcts:"):
        if spec.startswith(prefix):
            kind, rest = prefix[:-1], spec[len(prefix) :]
    return _checkpoint_path(spec, _split_simulations(spec, rest, kind)[0], resolver)


def resolve_command(command: str) -> list[str]:
    """argv for a GTP command line; the program is looked up on PATH, then in /usr/games."""
    try:
        argv = shlex.split(command)
    except ValueError as error:
        raise PlayerSpecError(f"player spec 'gtp:{command}': {error}") from None
    if not argv:
        raise PlayerSpecError("player spec 'gtp:': give the engine's command line after gtp:")
    program = shutil.which(argv[0])
    if program is None and os.sep not in argv[0]:
        found = (shutil.which(argv[0], path=d) for d in GAME_DIRS)
        program = next((p for p in found if p is not None), None)
    if program is None:
        raise PlayerSpecError(
            f"player spec 'gtp:{command}': program {argv[0]!r} not found on PATH or in /usr/games"
        )
    return [program, *argv[1:]]


def _split_simulations(spec: str, rest: str, kind: str) -> tuple[str, int | None]:
    match = _SIMS.match(rest)
    if match is None or (rest.startswith("models:/") and rest.count("@") < 2):
        return rest, None  # models:/NAME@ALIAS has one "@" of its own
    if kind == "raw":
        raise PlayerSpecError(f"player spec {spec!r}: the raw network has no simulations (@N)")
    sims = int(match["sims"])
    if sims < 1:
        raise PlayerSpecError(f"player spec {spec!r}: simulations must be >= 1")
    return match["path"], sims


def _checkpoint_path(spec: str, path: str, resolver: Resolver | None) -> Path:
    if path.startswith("models:/"):
        if resolver is None:
            raise PlayerSpecError(
                f"player spec {spec!r}: registry models need the pipeline's resolver "
                "(pass a checkpoint path instead)"
            )
        path = os.fspath(resolver(path))
    checkpoint = Path(path).expanduser()
    if not checkpoint.is_file():
        raise PlayerSpecError(
            f"player spec {spec!r}: no checkpoint file {str(checkpoint)!r} "
            "(use random, raw:PATH, mcts:PATH[@SIMS], gtp:COMMAND or models:/NAME@ALIAS)"
        )
    return checkpoint
