"""Unit grouping is defined once: ``text_units.display_units`` (Python) and ``buildUnits`` (js/src/lib/aggregate.js)
group the same ids into the same units, checked on generated cases (hypothesis), including ids that are not
contiguous, against each other and against an independent reference written here."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interp_widgets.text_units import GRANULARITIES, display_units, unit_members
from interp_widgets.widgets._tokens import role_starts

AGGREGATE_JS = Path(__file__).resolve().parent.parent / "js" / "src" / "lib" / "aggregate.js"
# Reads one JSON case per line on stdin, answers one JSON list of units per line.
NODE_LOOP = f"""
import {{ buildUnits, roleStarts }} from {json.dumps(AGGREGATE_JS.as_uri())};
import {{ createInterface }} from "node:readline";
for await (const line of createInterface({{ input: process.stdin }})) {{
  const c = JSON.parse(line);
  const units = buildUnits({{ granularity: c.granularity, wordIds: Int32Array.from(c.word_ids),
    sentenceIds: Int32Array.from(c.sentence_ids), turnIds: c.turn_ids && Int32Array.from(c.turn_ids),
    specialMask: Uint8Array.from(c.special), showSpecial: c.show_special }});
  const special = Uint8Array.from(c.special);
  const roles = c.roles ?? [];
  const starts = Object.fromEntries(roleStarts(units, c.turn_ids ?? null, special, roles));
  process.stdout.write(JSON.stringify({{ units, starts }}) + "\\n");
}}
"""


@pytest.fixture(scope="module")
def js_units():
    if shutil.which("node") is None:
        pytest.fail(
            "node is not on PATH: the JS side of unit grouping runs under Node 20+ (the README's test "
            "command needs it for `npm --prefix js test` too); install Node.js"
        )
    process = subprocess.Popen(["node", "--input-type=module", "-e", NODE_LOOP], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, bufsize=1)  # fmt: skip

    def ask(case: dict) -> tuple[list[list[int]], dict[int, str]]:
        process.stdin.write(json.dumps(case) + "\n")
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())
        return answer["units"], {int(u): role for u, role in answer["starts"].items()}

    yield ask
    process.stdin.close()
    process.wait(timeout=10)


def reference_units(special, word_ids, sentence_ids, granularity, show_special, turn_ids=None):
    """Independent statement of the rule: visible tokens sharing an id >= 0 form one unit, at its first token
    (without turn ids, every token is in turn 0)."""
    turns = [0] * len(special) if turn_ids is None else turn_ids
    ids = None if granularity == "token" else {"word": word_ids, "sentence": sentence_ids, "turn": turns}[granularity]
    first_of: dict[int, list[int]] = {}
    units = []
    for i, is_special in enumerate(special):
        if is_special and not show_special:
            continue
        key = None if ids is None or is_special or ids[i] < 0 else ids[i]
        if key is None:
            units.append([i])
        elif key in first_of:
            first_of[key].append(i)
        else:
            first_of[key] = [i]
            units.append(first_of[key])
    return units


cases = st.integers(1, 14).flatmap(lambda n: st.fixed_dictionaries({
    "special": st.lists(st.booleans(), min_size=n, max_size=n),
    "word_ids": st.lists(st.integers(-1, 5), min_size=n, max_size=n),
    "sentence_ids": st.lists(st.integers(-1, 2), min_size=n, max_size=n),
    "turn_ids": st.one_of(st.none(), st.lists(st.integers(-1, 3), min_size=n, max_size=n)),
    "roles": st.lists(st.sampled_from(["system", "user", "assistant", "<b>&"]), min_size=0, max_size=4),
    "granularity": st.sampled_from(GRANULARITIES),
    "show_special": st.booleans(),
}))  # fmt: skip


def reference_role_starts(units, special, turn_ids, roles):
    """Independent statement: a role label goes at each unit whose first non-special token with a known turn starts
    a turn other than the last one labelled."""
    if not roles or turn_ids is None:
        return {}
    starts, last = {}, None
    for u, unit in enumerate(units):
        turns = [turn_ids[i] for i in unit if not special[i] and 0 <= turn_ids[i] < len(roles)]
        if turns and turns[0] != last:
            starts[u], last = roles[turns[0]], turns[0]
    return starts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases)
def test_python_and_js_group_the_same_ids_into_the_same_units(js_units, case):
    special = np.array(case["special"], bool)
    turns = None if case["turn_ids"] is None else np.array(case["turn_ids"])
    python = display_units(special, np.array(case["word_ids"]), np.array(case["sentence_ids"]), case["granularity"],
                           show_special=case["show_special"], turn_ids=turns)  # fmt: skip
    expected = reference_units(case["special"], case["word_ids"], case["sentence_ids"], case["granularity"],
                               case["show_special"], case["turn_ids"])  # fmt: skip
    assert python == expected
    js, js_starts = js_units(case)
    assert js == expected
    # role labels of chat turns sit at the same units in the kernel's static pictures and in the browser
    starts = reference_role_starts(expected, case["special"], case["turn_ids"], case["roles"])
    assert js_starts == starts
    assert role_starts(expected, turns, special, case["roles"]) == (starts if turns is not None else {})


@settings(max_examples=200, deadline=None)
@given(case=cases)
def test_displayed_units_are_the_aggregation_units_plus_unassigned_tokens(case):
    special = np.array(case["special"], bool)
    words, sentences = (np.where(special, -1, case[name]) for name in ("word_ids", "sentence_ids"))  # as encode() gives
    turns = None if case["turn_ids"] is None else np.where(special, -1, case["turn_ids"])
    shown = display_units(special, words, sentences, case["granularity"], show_special=False, turn_ids=turns)
    members = [unit.tolist() for unit in unit_members(special, words, sentences, case["granularity"], turns)]
    assert [unit for unit in shown if unit in members] == sorted(members, key=lambda unit: unit[0])
    assert all(len(unit) == 1 for unit in shown if unit not in members)


def test_non_contiguous_ids_form_one_unit():
    special = np.array([0, 0, 0], bool)
    assert display_units(special, np.array([0, 1, 0]), np.zeros(3, int), "word") == [[0, 2], [1]]
