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

AGGREGATE_JS = Path(__file__).resolve().parent.parent / "js" / "src" / "lib" / "aggregate.js"
# Reads one JSON case per line on stdin, answers one JSON list of units per line.
NODE_LOOP = f"""
import {{ buildUnits }} from {json.dumps(AGGREGATE_JS.as_uri())};
import {{ createInterface }} from "node:readline";
for await (const line of createInterface({{ input: process.stdin }})) {{
  const c = JSON.parse(line);
  const units = buildUnits({{ granularity: c.granularity, wordIds: Int32Array.from(c.word_ids),
    sentenceIds: Int32Array.from(c.sentence_ids), specialMask: Uint8Array.from(c.special), showSpecial: c.show_special }});
  process.stdout.write(JSON.stringify(units) + "\\n");
}}
"""


@pytest.fixture(scope="module")
def js_units():
    if shutil.which("node") is None:
        pytest.fail("node is not on PATH: the JS side of unit grouping runs under Node 20+ (the README's test "
                    "command needs it for `npm --prefix js test` too); install Node.js")
    process = subprocess.Popen(["node", "--input-type=module", "-e", NODE_LOOP], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, bufsize=1)  # fmt: skip

    def ask(case: dict) -> list[list[int]]:
        process.stdin.write(json.dumps(case) + "\n")
        process.stdin.flush()
        return json.loads(process.stdout.readline())

    yield ask
    process.stdin.close()
    process.wait(timeout=10)


def reference_units(special, word_ids, sentence_ids, granularity, show_special):
    """Independent statement of the rule: visible tokens sharing an id >= 0 form one unit, at its first token."""
    ids = None if granularity == "token" else (word_ids if granularity == "word" else sentence_ids)
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
    "granularity": st.sampled_from(GRANULARITIES),
    "show_special": st.booleans(),
}))  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases)
def test_python_and_js_group_the_same_ids_into_the_same_units(js_units, case):
    special = np.array(case["special"], bool)
    python = display_units(special, np.array(case["word_ids"]), np.array(case["sentence_ids"]), case["granularity"],
                           show_special=case["show_special"])  # fmt: skip
    expected = reference_units(case["special"], case["word_ids"], case["sentence_ids"], case["granularity"],
                               case["show_special"])  # fmt: skip
    assert python == expected
    assert js_units(case) == expected


@settings(max_examples=200, deadline=None)
@given(case=cases)
def test_displayed_units_are_the_aggregation_units_plus_unassigned_tokens(case):
    special = np.array(case["special"], bool)
    words, sentences = (np.where(special, -1, case[name]) for name in ("word_ids", "sentence_ids"))  # as encode() gives
    shown = display_units(special, words, sentences, case["granularity"], show_special=False)
    members = [unit.tolist() for unit in unit_members(special, words, sentences, case["granularity"])]
    assert [unit for unit in shown if unit in members] == sorted(members, key=lambda unit: unit[0])
    assert all(len(unit) == 1 for unit in shown if unit not in members)


def test_non_contiguous_ids_form_one_unit():
    special = np.array([0, 0, 0], bool)
    assert display_units(special, np.array([0, 1, 0]), np.zeros(3, int), "word") == [[0, 2], [1]]
