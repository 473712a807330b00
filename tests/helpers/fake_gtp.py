"""A GTP engine that passes every move, then misbehaves on purpose (for the arena's tests).

usage: python fake_gtp.py MODE [--at K] [--once MARKER] [--meet DIR N]

MODE: "good" (never misbehaves), "die" (exits mid-game), "garbage" (answers without '='),
"nonsense" (answers "= banana"), "illegal" (plays on the opponent's last stone), "offboard"
(plays Z25), "hang" (never answers), "refuse" (rejects the opponent's moves with "? illegal
move"). It misbehaves at its K-th genmove (default 2; "refuse": from the K-th play on). With
--once MARKER it misbehaves only if MARKER does not exist yet, and creates it, so the process
that replaces it plays normally. With --meet DIR N its k-th genmove answers only once N
engines have received their k-th (each leaves a file in DIR), or after a minute: engines asked
one after another never meet. Standard library only.
"""

import os
import sys
import time
from pathlib import Path


def wait_for_others(folder: Path, engines: int, count: int) -> None:
    """Leave this engine's mark for its ``count``-th genmove; wait for ``engines`` marks."""
    (folder / f"{count}-{os.getpid()}").touch()
    deadline = time.monotonic() + 60.0
    while len(list(folder.glob(f"{count}-*"))) < engines and time.monotonic() < deadline:
        time.sleep(0.01)


def main() -> None:
    args = sys.argv[1:]
    mode = args[0]
    at = int(args[args.index("--at") + 1]) if "--at" in args else 2
    marker = Path(args[args.index("--once") + 1]) if "--once" in args else None
    meet = (
        (Path(args[args.index("--meet") + 1]), int(args[args.index("--meet") + 2]))
        if "--meet" in args
        else None
    )
    genmoves = plays = 0
    last_opponent = None

    def misbehave_now(count: int) -> bool:
        if count < at or (count > at and mode != "refuse"):
            return False
        if marker is not None and marker.exists():  # misbehaved once already
            return False
        if marker is not None:
            marker.touch()
        return True

    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        command = words[0]
        if command == "quit":
            print("=\n", flush=True)
            return
        if command == "play":
            plays += 1
            if mode == "refuse" and misbehave_now(plays):
                print("? illegal move\n", flush=True)
                continue
            if words[2].lower() != "pass":
                last_opponent = words[2]
            print("=\n", flush=True)
        elif command == "genmove":
            genmoves += 1
            if meet is not None:
                wait_for_others(*meet, genmoves)
            if mode != "refuse" and misbehave_now(genmoves):
                if mode == "die":
                    print("fake engine: dying on purpose", file=sys.stderr, flush=True)
                    sys.exit(3)
                if mode == "hang":
                    time.sleep(3600)
                answers = {
                    "garbage": "hello there",
                    "nonsense": "= banana",
                    "illegal": f"= {last_opponent or 'pass'}",
                    "offboard": "= Z25",
                }
                print(answers.get(mode, "= pass") + "\n", flush=True)
                continue
            print("= pass\n", flush=True)
        elif command == "name":
            print("= fake\n", flush=True)
        else:  # boardsize, komi, clear_board, protocol_version, ...
            print("=\n", flush=True)


if __name__ == "__main__":
    main()
