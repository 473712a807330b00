"""The configs `bench/strength.py` trains and rates, each with where its settings come from.

Each is a config file of ``configs/`` and overrides: ``MACHINE``, the fit to two cores every
config shares, then its own, with the source of its settings (docs/strength.md keeps what each
measured).
"""

from __future__ import annotations

from dataclasses import dataclass

# The machine fit every config shares: two self-play workers on two cores, batches of 256, no
# DataLoader processes, fp32 training (the configs whose precision is chosen per machine say
# so), no anchor games inside the run: the benchmark rates the checkpoints after the budget, so
# the run's CPU-seconds go to learning. The budget is the benchmark's (--core-hours), and it
# ends at the first boundary past it, as the configs measured before the screenings ran
# (`EQUAL_BUDGET` below for those), and no iteration shrinks or stretches to fit it
# (`pipeline.budget_shrink` and `budget_stretch` came after all of them): every run resumes as
# it was frozen.
MACHINE = [
    "selfplay.workers=2",
    "selfplay.concurrent_games=64",
    "selfplay.batch_size=256",
    "training.num_workers=0",
    "training.bf16=false",
    "evaluation.anchors=[]",
    "evaluation.anchor_games=0",
    "pipeline.budget_overshoot=null",
    "pipeline.budget_shrink=null",
    "pipeline.budget_stretch=null",
]


# The configs whose precision is part of the preset (docs/strength.md): chosen per machine.
PER_MACHINE_PRECISION = "training.bf16=auto"
# The quick start's settings before it took the laptop preset's (docs/strength.md), kept so
# that the runs measured then can be repeated: the paper's search, targets, gate and resignation.
PUCT_QUICKSTART = (
    "search.algorithm=puct",
    "network.aux_heads=false",
    "selfplay.games=192",
    "selfplay.v_resign=-0.9",
    "selfplay.full_search_fraction=1.0",
    "training.steps=250",
    "training.samples_per_row=null",
    "training.checkpoint_every=250",
    "training.value_target_mix=0.0",
    "evaluation.gating=true",
)

# The quick start's window until bench.quickstart measured five iterations against it (config
# format 11, docs/strength.md): every config on configs/quickstart.yaml trains on the last ten
# iterations' games, as its runs did, so that they resume and compare as they were frozen.
TEN_ITERATION_WINDOW = "training.window_games=3840"
# The paper's learning rates, the default's until bench.strength's lr3 (docs/strength.md).
PAPER_RATES = "training.lr_values=[0.01,0.001,0.0001]"

# The default's playout caps before they became KataGo's (docs/strength.md, "KataGo's playout
# caps as KataGo runs them"), kept so that the runs measured then can be repeated.
ALL_ROWS = (
    "selfplay.quiet_fast_searches=false",
    "selfplay.record_fast_rows=true",
    "training.samples_per_row=null",
)

# The budget's end for the screenings of targets that reward good play and their baseline: no
# iteration starts that is predicted to end the run more than 3% past its budget, so the arms
# of a pair spend the same (the earlier configs keep stopping at the first boundary past it, so
# that their runs resume as they were frozen).
EQUAL_BUDGET = "pipeline.budget_overshoot=0.03"
# What every config on configs/quickstart.yaml shares: the machine fit, the window its runs
# were frozen with, and as many iterations as the budget pays for.
ON_QUICKSTART = (*MACHINE, TEN_ITERATION_WINDOW, "pipeline.iterations=1000")
# Two switches that give the network fresher games for the same budget, screened alone
# (spr2, win5) and together (fresh).
TWO_PASSES = "training.samples_per_row=2"
FIVE_ITERATION_WINDOW = "training.window_games=1920"
# The shorter window after it, screened at the quick start's budget (win3) and on the laptop
# preset's settings at one core-hour (lf2win3).
THREE_ITERATION_WINDOW = "training.window_games=1152"


@dataclass(frozen=True)
class Entry:
    """A config of the benchmark: a config file, overrides, and where its settings come from."""

    file: str
    overrides: tuple[str, ...]
    source: str


def _on_quickstart(change: tuple[str, ...], source: str) -> Entry:
    """configs/quickstart.yaml as the benchmark runs it (`ON_QUICKSTART`), with ``change``."""
    return Entry("configs/quickstart.yaml", (*ON_QUICKSTART, *change), source)


def _screening(change: tuple[str, ...], source: str) -> Entry:
    """The default at an equal budget (what every screening shares), with ``change``."""
    return _on_quickstart((PER_MACHINE_PRECISION, EQUAL_BUDGET, *change), source)


CONFIGS = {
    "paper": Entry(
        "configs/9x9.yaml",
        (
            *MACHINE,
            "network.blocks=4",
            "network.filters=32",
            "network.value_hidden=64",
            "selfplay.games=192",
            "pipeline.iterations=1000",
        ),
        "Silver et al. 2017 (Methods) via configs/9x9.yaml; quick-start network, 192 games",
    ),
    "default": _on_quickstart(
        (PER_MACHINE_PRECISION,),
        "configs/quickstart.yaml (the current default: the laptop preset's settings, with"
        " KataGo's playout caps since the `katago` config of strength-1ch-katago.json)",
    ),
    "katago": _on_quickstart(
        (PER_MACHINE_PRECISION, PAPER_RATES),
        "the default of strength-1ch-katago.json under the name it was screened with, at the"
        " paper's learning rate as it ran, so that later screenings at one core-hour play against"
        " that run (resumed, its frozen config must match) instead of training it again",
    ),
    "lr3": _on_quickstart(
        (PER_MACHINE_PRECISION, "training.lr_values=[0.03,0.003,0.0003]"),
        "default with three times the learning rate at every stage of its schedule (ours: the"
        " paper's 0.01 was set for batches of 2,048; whether a higher rate learns faster over a"
        " budget whose schedule anneals at its end)",
    ),
    "lr10": _on_quickstart(
        (PER_MACHINE_PRECISION, "training.lr_values=[0.1,0.01,0.001]"),
        "default with ten times the paper's learning rate at every stage (Goyal et al. 2017: 0.1"
        " for batches of 256, the ResNet recipe; tabula trains on 256)",
    ),
    "g192": _on_quickstart(
        (PER_MACHINE_PRECISION, "selfplay.games=192"),
        "default with iterations of 192 games instead of 384 (ours): twice as many network"
        " updates over a budget, so self-play always uses a newer network; the window keeps its"
        " 3,840 games",
    ),
    "reduced": _on_quickstart(
        (PER_MACHINE_PRECISION, "selfplay.decided_threshold=0.9"),
        "default with KataGo's reduced visits (its selfplay configs: reduceVisitsThreshold 0.9"
        " over 3 searches): a decided game's moves get fast searches, which record no rows",
    ),
    "puct": _on_quickstart(
        PUCT_QUICKSTART,
        "the quick start before the laptop preset (the `default` of the tables measured before it"
        " took the laptop preset's settings): the paper's PUCT search and targets, gated,"
        " resigning",
    ),
    "gumbel": _on_quickstart(
        (*PUCT_QUICKSTART, "search.algorithm=gumbel", "evaluation.gating=false"),
        "puct with the Gumbel search (Danihelka et al. 2022) and no gating (Silver et al. 2018;"
        " KataGo)",
    ),
    "aux": _on_quickstart(
        (*PUCT_QUICKSTART, "network.aux_heads=true"),
        "puct with KataGo's ownership and score heads (Wu 2019)",
    ),
    "allrows": _on_quickstart(
        (PER_MACHINE_PRECISION, *ALL_ROWS),
        "the default before it took KataGo's playout caps (the `default` of the tables measured"
        " before then): fast searches with root noise, their rows recorded and weighted as full"
        " searches', 500 steps an iteration",
    ),
    "kcaps": _on_quickstart(
        (
            PER_MACHINE_PRECISION,
            *ALL_ROWS,
            "selfplay.quiet_fast_searches=true",
            "training.fast_row_weight=0.0",
        ),
        "allrows with fast searches without root noise, playing their best move, and their"
        " rows recorded with no weight (Wu 2019, section 3.1, in part)",
    ),
    "pivalue": _on_quickstart(
        (PER_MACHINE_PRECISION, "selfplay.root_value=improved"),
        "default with the root value of the value target taken as the sum of pi' times the"
        " completed Q (Danihelka et al. 2022) instead of the search's mean value",
    ),
    "m4": _on_quickstart(
        (PER_MACHINE_PRECISION, "search.gumbel_m=4"),
        "default with 4 actions sampled at the root (Danihelka et al. 2022: m <= n), so that at"
        " 16 simulations Sequential Halving halves (4 x 2 then 2 x 4 visits) instead of giving"
        " each of 16 actions one visit",
    ),
    "wide": _on_quickstart(
        (PER_MACHINE_PRECISION, "network.blocks=6", "network.filters=64"),
        "default with a network of 6 residual blocks x 64 filters instead of 4 x 32 (capacity:"
        " whether a bigger net learns more per core-hour despite about 6 times the compute per"
        " position)",
    ),
    "baseline": _screening(
        (),
        "default at an equal budget (pipeline.budget_overshoot 0.03): the baseline of the"
        " screenings below, re-run alone with its provenance",
    ),
    "tau0": _screening(
        ("selfplay.move_choice=opening",),
        "default playing the mode of pi' after the opening instead of Sequential Halving's"
        " survivor (the paper's tau -> 0 after 30 moves on 19x19, scaled to the board)",
    ),
    "ktemp": _screening(
        ("selfplay.move_choice=decay",),
        "default playing a sample of pi' at KataGo's decaying temperature (0.75 to 0.15, a"
        " half-life of 19 moves on 19x19: its selfplay configs' chosenMoveTemperature*)",
    ),
    "z0": _screening(
        ("training.value_target_mix=0.0",),
        "default with the value target z alone (lambda 0, the paper)",
    ),
    "mix25": _screening(
        ("training.value_target_mix=0.25",),
        "default with the value target (1 - lambda) z + lambda v_root at lambda 0.25",
    ),
    "visitvalue": _screening(
        ("selfplay.root_value=visits",),
        "default with the root value of the value target weighing the root's children by their"
        " visits, without the root's own network value",
    ),
    "reduced01": _screening(
        ("selfplay.decided_threshold=0.9", "selfplay.decided_row_weight=0.1"),
        "reduced with a decided game's rows kept at weight 0.1, their pi a policy target"
        " (KataGo's reducedVisitsWeight) instead of dropped",
    ),
    "reduced01f": _screening(
        (
            "selfplay.decided_threshold=0.9",
            "selfplay.decided_row_weight=0.1",
            "training.row_weights=frequency",
        ),
        "reduced01 with the weight as KataGo uses it, a frequency: a decided row is drawn a"
        " tenth as often as a full one, at full weight, and counts a tenth of a row when the"
        " steps are sized (reduced01 trained 37% more samples an iteration than the default)",
    ),
    "libs": _screening(
        ("network.liberties=true",),
        "default with 6 liberty planes after the 17 (1, 2, >= 3 liberties for each side's"
        " chains; KataGo's liberty inputs, Wu 2019)",
    ),
    "ladders": _screening(
        ("network.ladders=true",),
        "default with 3 ladder planes after the liberty planes (each side's stones a ladder"
        " captures, the side to move's moves that start one; KataGo's ladder inputs, Wu 2019)",
    ),
    "gpool": _screening(
        ("network.global_pooling=true",),
        "default whose every second residual block adds a bias per channel from the mean and"
        " max over the board of a quarter of its channels (KataGo's global pooling, Wu 2019)",
    ),
    "spr8": _screening(
        ("training.samples_per_row=8",),
        "default training each recorded row about 8 times instead of 4 (ours: bench.fit found the"
        " 4 x 32 network fitting fresh games as well as its window at one core-hour, so whether"
        " more steps on the same games learn more per core-hour than more games)",
    ),
    "spr2": _screening(
        (TWO_PASSES,),
        "default training each recorded row about 2 times instead of 4 (ours: spr8 lost at one"
        " core-hour with fewer games, so whether more games and fewer passes learn more)",
    ),
    "win5": _screening(
        (FIVE_ITERATION_WINDOW,),
        "default training on the last 5 iterations' games instead of 10 (ours: bench.fit found"
        " no over-fitting at one core-hour, and the window's policy loss above that of the next"
        " games, whose targets come from a stronger search; KataGo's window starts small and"
        " grows with the run, Wu 2019)",
    ),
    "win3": _screening(
        (THREE_ITERATION_WINDOW,),
        "win5, the quick start's default in config format 11, training on the last 3"
        " iterations' games instead of 5 (ours: whether the gain of 5 over 10 at the quick"
        " start's budget goes on; each row is still drawn about 4 times, within 3 iterations)",
    ),
    "fast2": _screening(
        (FIVE_ITERATION_WINDOW, "selfplay.fast_simulations=2"),
        "win5, the quick start's default in config format 11, whose fast searches (three"
        " moves in four, unrecorded) run 2 simulations instead of 4 (KataGo's fast searches are"
        " a sixth of its full ones, 100 of 600, Wu 2019; ours a quarter): about a fifth less"
        " self-play a game, so more games for the same budget",
    ),
    "fresh": _screening(
        (TWO_PASSES, FIVE_ITERATION_WINDOW),
        "spr2 and win5 together: each recorded row trained about twice, on the last 5"
        " iterations' games (ours: each alone was ahead of the default against GnuGo level 1 at"
        " one core-hour and level with it head to head, docs/strength.md)",
    ),
    "score": _screening(
        ("search.score_utility=0.4",),
        "default whose search values a position by its win/loss value and a share of the score"
        " head's margin, (v + 0.4 * 2/pi * atan(score / 18)) / 1.4 (KataGo's score utility, Wu"
        " 2019: its static 0.1 and dynamic 0.3 factors together, here all centered at zero),"
        " so that decided games still fight for points",
    ),
    "grow": _screening(
        ("network.grow=[[60,6],[120,8]]",),
        "default whose 4 x 32 network grows to 6 blocks at iteration 60 and 8 at iteration 120,"
        " each new block starting as the identity (KataGo grew b6 -> b10 -> b15 during its"
        " runs; Net2Net, Chen et al. 2016); for a 4 core-hour screening against the fixed net",
    ),
    "areapass": _screening(
        ("search.own_area_pass=true",),
        "default whose search may also pass when every legal move but its own-eye fills lies"
        " in its own area (ours), in self-play and in play: whether a network that self-plays"
        " with that pass learns to take it where the default fills its own eye space until its"
        " groups die (docs/strength.md)",
    ),
    "growladders": _screening(
        ("network.ladders=true", "network.grow=[[100,6],[180,8]]"),
        "ladders whose 4 x 32 network grows to 6 blocks at iteration 100 and 8 at iteration"
        " 180, each new block starting as the identity (KataGo grew b6 -> b10 -> b15 during its"
        " runs; Net2Net, Chen et al. 2016): where the four-core-hour ladders run on the AMD EPYC"
        " flattened against GnuGo level 1 (about iteration 110 of 275), against that fixed net",
    ),
    "full32": _screening(
        ("network.ladders=true", "search.simulations=32", "selfplay.fast_simulations=4"),
        "ladders whose full searches (a quarter of the moves, the recorded rows) run 32"
        " simulations instead of 16, the fast ones still 4: deeper searches for the policy and"
        " value targets at about 1.6 times self-play's cost (KataGo's full searches run 6 times"
        " its fast ones' playouts, Wu 2019; ours: whether better targets pay for fewer"
        " iterations, where the deeper search at play time does not, docs/strength.md)",
    ),
    "ladfast2": _screening(
        ("network.ladders=true", "selfplay.fast_simulations=2"),
        "ladders whose fast searches (three moves in four, unrecorded) run 2 simulations instead"
        " of 4 (KataGo's fast searches are a sixth of its full ones, 100 of 600, Wu 2019): on a"
        " CPU where a core-hour holds few iterations, more games for the same budget; fast2 won"
        " 78 of 100 head to head at the quick start's budget (docs/strength.md)",
    ),
    "lf2spr2": _screening(
        ("network.ladders=true", "selfplay.fast_simulations=2", TWO_PASSES),
        "ladfast2 training each recorded row about 2 times instead of 4: on a CPU without bf16,"
        " where a core-hour holds two thirds of the iterations it holds with bf16, a fifth of"
        " the budget moves from training to self-play (ours; spr2 gained 11 games of 100"
        " against GnuGo level 1 at one core-hour on an Intel Xeon, level head to head,"
        " docs/strength.md)",
    ),
    "lf2win5": _screening(
        ("network.ladders=true", "selfplay.fast_simulations=2", FIVE_ITERATION_WINDOW),
        "ladfast2 training on the last 5 iterations' games instead of 10: on a CPU without"
        " bf16 a core-hour holds about 48 iterations, where ten iterations are a fifth of the"
        " run (ours; win5 won 61 of 100 at the quick start's budget on that CPU, and gained 15"
        " games of 100 against GnuGo level 1 at one core-hour on an Intel Xeon, none on the"
        " AMD EPYC with bf16; KataGo's window starts small, Wu 2019; docs/strength.md)",
    ),
    "lf2win3": _screening(
        ("network.ladders=true", "selfplay.fast_simulations=2", THREE_ITERATION_WINDOW),
        "ladfast2 training on the last 3 iterations' games instead of 10: lf2win5 (5 of 10)"
        " gained 7 games of 100 against GnuGo level 1 at one core-hour on a CPU without bf16,"
        " level head to head, and each shorter window gained at the quick start's budget (five"
        " to three, three to two; ours; KataGo's window starts small, Wu 2019;"
        " docs/strength.md): whether a window of about a sixteenth of the run goes on gaining",
    ),
    "growlf2": _screening(
        ("network.ladders=true", "selfplay.fast_simulations=2", "network.grow=[[60,6],[110,8]]"),
        "ladfast2 whose 4 x 32 network grows to 6 blocks at iteration 60 and 8 at iteration 110,"
        " each new block starting as the identity: growladders grew at 47% and 84% of the 214"
        " iterations it held at four core-hours with bf16; on a CPU without bf16, where an"
        " iteration of ladfast2 costs about 95 CPU-seconds, four core-hours hold about 130 (ours;"
        " KataGo grew b6 -> b10 -> b15 during its runs, Wu 2019; docs/strength.md)",
    ),
    "deep32": _screening(
        ("search.simulations=32", "selfplay.fast_simulations=4"),
        "the default (no ladder planes) whose full searches run 32 simulations, the fast ones"
        " still 4: full32's deeper targets at the quick start's budget, where the ladder planes"
        " lost (docs/strength.md); full32 won no more games head to head at one core-hour but"
        " lost by less against GnuGo level 1, the quick start's measure",
    ),
    "surprise": _screening(
        (
            "network.ladders=true",
            "selfplay.policy_surprise_weight=0.5",
            "training.row_weights=frequency",
        ),
        "ladders with KataGo's policy surprise weighting: half of each game's full rows' weight"
        " spread evenly, half by KL(pi || prior), and rows drawn in proportion to their weight"
        " (Wu, KataGo's docs/KataGoMethods.md, 'Policy Surprise Weighting': 'one of the larger"
        " improvements' of its g170 run)",
    ),
    "laptop": Entry(
        "configs/9x9-laptop.yaml",
        (*MACHINE, "pipeline.iterations=1000", PER_MACHINE_PRECISION),
        "configs/9x9-laptop.yaml: Gumbel search, playout caps, ownership and score heads, z"
        " mixed with the root value, no resignation, no gating, bf16 where native",
    ),
}
