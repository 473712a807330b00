"""The promotion stage: crown the candidate the gate promoted (`crown`, as the iteration's
stages end), then record its registered version and the champion after (`promote`, in the
iteration's close, beside the next iteration: `flows.beside`); and the check that a checkpoint
an iteration starts from still holds the weights recorded.

``champion.json`` points at the current best checkpoint and holds its ``weights_sha256``
(`model.network.weights_sha256`, the hash the training record and the registry's
``tabula.weights_sha256`` tag hold); it is replaced atomically, so a reader sees the old
champion or the new one, never half of either. Self-play and the gate play the champion's
``model.pt`` from disk, and training's DVC record names its parent's folder, so before each of
these stages `check_model` hashes the weights of the file it depends on against the recorded
hash: a checkpoint swapped for another network, valid as it may be, is refused in one line
naming the file, before any game is played with it or any record names it.
"""

from __future__ import annotations

from prefect import task

from tabula.errors import TabulaError
from tasks.retry import IO_RETRIES
from tasks.run.layout import RunLayout
from tasks.run.markers import champion, finished, write_record
from tasks.run.records import Champion, InitRecord, PromotionRecord, Stage, TrainRecord


class ModelChangedError(TabulaError):
    """An iteration's checkpoint holds other weights than were recorded for it (a file
    replaced by hand, or by another run's); the one line names the file and the DVC command
    that restores it. Nothing was played or recorded: restore the file and run again."""


@task(name="set-champion", task_run_name="champion-i{iteration}", **IO_RETRIES)
def set_champion(
    layout: RunLayout, iteration: int, version: int | str | None, weights_sha256: str
) -> Champion:
    """Make iteration ``iteration``'s model, whose weights hash to ``weights_sha256``, the
    champion: ``champion.json``, replaced atomically."""
    crowned = Champion(iteration, layout.rel(layout.model(iteration)), version, weights_sha256)
    write_record(layout.champion, crowned)
    return crowned


@task(name="crown", task_run_name="crown-i{iteration}", **IO_RETRIES)
def crown(layout: RunLayout, iteration: int, promoted: bool, weights_sha256: str) -> None:
    """Make iteration ``iteration``'s model the champion when the gate promoted it, before it
    is registered (`promote` records its version afterwards, in the iteration's close, while
    the next iteration already plays it)."""
    best = champion(layout)
    if promoted and (best is None or best.iteration != iteration):
        set_champion.fn(layout, iteration, None, weights_sha256)


@task(name="promote", task_run_name="promote-i{iteration}", **IO_RETRIES)
def promote(
    layout: RunLayout,
    iteration: int,
    promoted: bool,
    version: int | str | None,
    weights_sha256: str,
) -> PromotionRecord:
    """Crown iteration ``iteration``'s model (its trained weights: ``weights_sha256``) when
    the gate promoted it; the champion after."""
    if promoted:
        set_champion.fn(layout, iteration, version, weights_sha256)
    best = champion(layout)
    return PromotionRecord(
        promoted=promoted, version=version, champion=0 if best is None else best.iteration
    )


def recorded_weights(layout: RunLayout, iteration: int) -> str | None:
    """The ``weights_sha256`` recorded for iteration ``iteration``'s model.

    ``champion.json``'s when it names that iteration and holds one; else the one the stage
    that made the model recorded (the ``init`` marker's for iteration 0, the ``train``
    marker's after), which is how a ``champion.json`` written before it held the hash is
    still checked, and an iteration planned before a kill at its promotion crowned the next
    champion still checks the one it plays. None when neither exists (nothing to check).
    """
    crowned = champion(layout)
    if crowned is not None and crowned.iteration == iteration and crowned.weights_sha256:
        return crowned.weights_sha256
    if iteration == 0:
        made = finished(layout, 0, Stage.INIT, InitRecord)
        return None if made is None else made.sha256
    trained = finished(layout, iteration, Stage.TRAIN, TrainRecord)
    return None if trained is None else trained.trained.result.weights_sha256


@task(name="check-model", task_run_name="check-model-i{iteration}", **IO_RETRIES)
def check_model(layout: RunLayout, iteration: int) -> None:
    """Refuse (`ModelChangedError`) iteration ``iteration``'s ``model.pt`` (the champion
    self-play and the gate play, the parent training continues from) when its weights are not
    the ones recorded for it (`recorded_weights`); an unreadable file is refused by
    `model.checkpoint.load_checkpoint`, naming it too."""
    from model.checkpoint import load_checkpoint
    from model.network import weights_sha256

    recorded = recorded_weights(layout, iteration)
    if recorded is None:
        return
    path = layout.model(iteration)
    found = weights_sha256(load_checkpoint(path)[0])
    if found != recorded:
        stage = Stage.INIT if iteration == 0 else Stage.TRAIN
        target = f"{layout.rel(layout.stage_file(iteration))}:{stage.value}"
        raise ModelChangedError(
            f"{layout.rel(path)}: the weights are not the ones recorded for iteration "
            f"{iteration} (sha256 {found[:12]}…, recorded {recorded[:12]}…); restore it with "
            f"`dvc checkout {target}` and run the command again"
        )
