"""No line, however malformed, escapes `GtpEngine.handle`; every answer is well-formed GTP."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tabula.gtp import GtpEngine
from tabula.players import RandomPlayer

COMMANDS = [
    "protocol_version", "name", "version", "known_command", "list_commands", "boardsize",
    "clear_board", "komi", "play", "genmove", "kgs-genmove_cleanup", "undo", "showboard",
    "final_score", "time_settings", "time_left", "quit",
]  # fmt: skip

letters = st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdehjtz")
vertices = st.builds(lambda c, r: f"{c}{r}", letters, st.integers(-3, 30))
numbers = st.one_of(
    st.integers(-(10**40), 10**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["5", "7", "9", "19", "0", "-0", "+9", "1e999", "nan", ".5", "1_0"]),
    st.integers(100, 6000).map(lambda n: "9" * n),  # past Python's int() digit limit
)
words = st.one_of(
    vertices,
    numbers,
    st.sampled_from(["b", "w", "B", "black", "WHITE", "pass", "PASS", "resign", "#", ""]),
    st.sampled_from(COMMANDS),
    st.text(min_size=1, max_size=12),
    st.text(min_size=500, max_size=3000),  # very long tokens
)
command_lines = st.builds(
    lambda cmd_id, cmd, args: " ".join([*cmd_id, cmd, *args]),
    st.lists(st.integers(0, 10**30).map(str), max_size=1),
    st.sampled_from(COMMANDS),
    st.lists(words, max_size=4),
)
junk_lines = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.binary(max_size=200).map(lambda b: b.decode("utf-8", errors="replace")),
    st.lists(words, max_size=6).map(" ".join),
)
lines = st.one_of(command_lines, command_lines, junk_lines)


def check_response(line: str, response: str | None) -> None:
    if response is None:
        return
    assert isinstance(response, str)
    assert response[0] in "=?", (line, response)
    assert response.endswith("\n\n"), (line, response)
    assert "\n\n" not in response[:-2], (line, response)  # the blank line ends the response
    assert "internal error" not in response, (line, response)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(lines, min_size=1, max_size=25), st.sampled_from([5, 7, 9]))
def test_random_lines_never_raise_and_always_answer_gtp(script: list[str], size: int) -> None:
    engine = GtpEngine(RandomPlayer(0), size=size)
    for line in script:
        check_response(line, engine.handle(line))
        assert 5 <= engine.game.size <= 19
    # The engine is still usable after whatever came before.
    assert engine.handle("1 showboard") is not None
    assert engine.handle("2 final_score").startswith("=2 ")  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["genmove b", "genmove w", "undo", "play b pass",
                                 "play w pass", "kgs-genmove_cleanup b"]),
                min_size=1, max_size=60))  # fmt: skip
def test_move_sequences_keep_the_engine_consistent(script: list[str]) -> None:
    engine = GtpEngine(RandomPlayer(1), size=5)
    for line in script:
        response = engine.handle(line)
        check_response(line, response)
        assert response is not None
        if line.startswith(("genmove", "kgs")):
            assert response.startswith("= ")
    assert len(engine.game.history) <= len(script)
