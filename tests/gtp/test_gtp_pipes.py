"""GTP over real pipes: our engine as a subprocess, and a whole game against GNU Go."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tabula.go import coords
from tabula.gtp import GtpEngine
from tabula.players import RandomPlayer

ROOT = Path(__file__).resolve().parents[2]
GNUGO = Path("/usr/games/gnugo")  # Debian installs it here, not on PATH
SERVE = (
    "from tabula.gtp import serve; from tabula.players import RandomPlayer; serve(RandomPlayer(0))"
)


class GtpPipe:
    """A GTP controller over a subprocess's pipes, with a deadline on every response."""

    def __init__(self, argv: list[str], timeout: float = 60.0) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=ROOT, env=env,
        )  # fmt: skip
        self.timeout = timeout
        self._buffer = b""

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def _read_until(self, end: bytes, what: str) -> bytes:
        """Bytes up to ``end`` (dropped from the buffer); fails if they do not come in time."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + self.timeout
        while end not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise AssertionError(f"no {what} within {self.timeout}s: {self._buffer!r}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"engine closed its output: {self._buffer!r}")
            self._buffer += chunk
        head, self._buffer = self._buffer.split(end, 1)
        return head

    def read_response(self) -> str:
        """Bytes up to the next blank line; fails if the engine does not answer in time."""
        return self._read_until(b"\n\n", "GTP response").decode() + "\n\n"

    def read_line(self) -> str:
        """One line (without its newline), e.g. of a streaming ``lz-analyze`` response."""
        return self._read_until(b"\n", "line").decode()

    def ask(self, command: str) -> str:
        self.send_raw(command.encode() + b"\n")
        return self.read_response()

    def close(self) -> int:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=self.timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def test_serve_answers_each_command_as_it_comes_over_pipes() -> None:
    engine = GtpPipe([sys.executable, "-c", SERVE])
    try:
        # One command at a time: each answer must arrive before the next line is sent,
        # which only works if serve() flushes after every response.
        assert engine.ask("1 name") == "=1 tabula\n\n"
        assert engine.ask("2 boardsize 7") == "=2 \n\n"
        assert engine.ask("3 play b D4") == "=3 \n\n"
        assert engine.ask("4 play w D4") == "?4 illegal move\n\n"
        answer = engine.ask("5 genmove w")
        assert answer.startswith("=5 ") and answer != "=5 pass\n\n"
        coords.from_gtp(answer[3:-2], 7)
        # Undecodable bytes, CRLF and tabs on the wire.
        engine.send_raw(b"\xff\xfe\x80junk\r\n6\tname\r\n# comment\n\n")
        assert engine.read_response() == "? unknown command\n\n"
        assert engine.read_response() == "=6 tabula\n\n"
        assert engine.ask("7 quit") == "=7 \n\n"
        assert engine.close() == 0
    finally:
        engine.close()


def test_serve_stops_cleanly_at_end_of_input() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SERVE], input=b"protocol_version\nshowboard\n",
        capture_output=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    out = proc.stdout.decode()
    assert out.startswith("= 2\n\n= \n   A B C D E F G H J\n")
    assert out.endswith("\n\n") and out.count("\n\n") == 2
    assert proc.stderr == b""


def gnugo_stones(gnugo: GtpPipe, colour: str, size: int) -> set[int]:
    answer = gnugo.ask(f"list_stones {colour}")
    assert answer.startswith("= "), answer
    return {coords.from_gtp(v, size) for v in answer[2:].split()}


def play_against_gnugo(seed: int, ours: int, size: int = 9) -> GtpEngine:
    """Alternate genmove between our engine and GNU Go, relaying each move to the other."""
    engine = GtpEngine(RandomPlayer(seed), size=size, komi=7.5)
    gnugo = GtpPipe([str(GNUGO), "--mode", "gtp", "--level", "1", "--boardsize", str(size),
                     "--seed", str(seed + 1)])  # fmt: skip
    try:
        for command in [f"boardsize {size}", "clear_board", "komi 7.5"]:
            assert gnugo.ask(command) == "= \n\n"
        colour, passes, moves = "b", 0, 0
        while passes < 2 and moves < 2 * size * size:
            mover_is_ours = (colour == "b") == (ours == 1)
            if mover_is_ours:
                answer = engine.handle(f"genmove {colour}")
            else:
                answer = gnugo.ask(f"genmove {colour}")
            assert answer is not None and answer.startswith("= "), answer
            vertex = answer[2:].strip()
            if vertex.lower() == "resign":
                break
            relayed = gnugo.ask(f"play {colour} {vertex}") if mover_is_ours else (
                engine.handle(f"play {colour} {vertex}")
            )  # fmt: skip
            assert relayed == "= \n\n", f"move {moves + 1} {colour} {vertex}: {relayed}"
            passes = passes + 1 if vertex.lower() == "pass" else 0
            moves += 1
            colour = "w" if colour == "b" else "b"
        # Both engines hold the same position: captures were resolved the same way.
        board = engine.game.board.reshape(-1)
        for name, value in [("black", 1), ("white", -1)]:
            assert gnugo_stones(gnugo, name, size) == set(map(int, (board == value).nonzero()[0]))
        assert gnugo.ask("quit") == "= \n\n"
        assert gnugo.close() == 0
    finally:
        gnugo.close()
    return engine


@pytest.mark.gnugo
@pytest.mark.skipif(not GNUGO.exists(), reason="gnugo is not installed (apt-get install gnugo)")
@pytest.mark.parametrize(("seed", "ours"), [(0, 1), (1, -1)])
def test_whole_game_against_gnugo(seed: int, ours: int) -> None:
    engine = play_against_gnugo(seed, ours)
    game = engine.game
    assert len(game.history) >= 10
    # Our own Tromp-Taylor score (not GNU Go's final_score), and the GTP answer agrees.
    score = game.score()
    assert score != int(score)  # komi 7.5: no draws
    expected = f"B+{score:g}" if score > 0 else f"W+{-score:g}"
    assert engine.handle("final_score") == f"= {expected}\n\n"
