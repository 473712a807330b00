"""No query, however malformed, stops the analysis engine: every line of input gets JSON
objects back (answers, warnings or errors), never an exception."""

from __future__ import annotations

import io
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.evaluator import UniformEvaluator
from tabula.config import load_config
from tabula.katago import Defaults, respond, serve
from tabula.players import MctsPlayer

FIELDS = ["id", "moves", "initialStones", "initialPlayer", "rules", "komi", "boardXSize",
          "boardYSize", "analyzeTurns", "maxVisits", "includeOwnership", "includePolicy",
          "overrideSettings", "action", "priority"]  # fmt: skip
PLAYER = MctsPlayer(UniformEvaluator(), load_config(None, ["rules.board_size=5"]), 4, "uniform")
DEFAULTS = Defaults(size=5, komi=7.5, visits=2, aux=False)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.text(max_size=6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["B", "W", "b", "x", "C3", "pass", "A1", "E5", "Z9", "tromp-taylor", "BLACK",
                     "query_version", "terminate", 0, 1, 2, 5, 7.5, -1]),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
moves = st.lists(
    st.tuples(st.sampled_from(["B", "W"]), st.sampled_from(["A1", "C3", "E5", "pass", "B2"])),
    max_size=6,
).map(lambda pairs: [list(p) for p in pairs])
#: Mostly well-formed queries with some fields wrong, so that many reach the search.
near_misses = st.fixed_dictionaries(
    {"id": st.text(max_size=3), "boardXSize": st.just(5), "boardYSize": st.just(5),
     "rules": st.just("tromp-taylor"), "moves": moves},
    optional={f: values for f in FIELDS if f not in ("id", "moves", "rules", "boardXSize",
                                                     "boardYSize", "action")},
)  # fmt: skip
wild = st.fixed_dictionaries(
    {"id": st.one_of(st.text(max_size=3), scalars)},
    optional={field: values for field in FIELDS[1:]},
)
queries = st.one_of(near_misses, near_misses, wild)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queries)
def test_any_query_gets_json_objects_back(query):
    for reply in respond(json.dumps(query), DEFAULTS, PLAYER):
        assert isinstance(reply, dict) and json.loads(json.dumps(reply)) == reply
        assert "error" in reply or "warning" in reply or "moveInfos" in reply or "action" in reply


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_line_gets_json_objects_back(line):
    for reply in respond(line, DEFAULTS, PLAYER):
        assert isinstance(reply, dict)


def test_deep_nesting_and_undecodable_bytes_are_errors_too():
    raw = io.TextIOWrapper(io.BytesIO(b"[" * 100_000 + b"\n\xff\xfe{\n"), encoding="utf-8")
    out = io.StringIO()
    serve(raw, out, DEFAULTS, PLAYER)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(replies) == 2 and all(set(r) == {"error"} for r in replies)
