/**
 * Token → word / sentence / turn aggregation done in the browser (no kernel round trip). A unit is every visible
 * token sharing an id value (adjacent or not), placed at its first token; a special token (when shown) or
 * a token with id -1 is a unit of its own. This mirrors `display_units` in `interp_widgets/text_units.py`
 * on the same ids the kernel sends (tests/test_unit_grouping.py checks the two agree). A unit's
 * score is the sum of its tokens' scores. NaN marks a token the target cannot see (e.g. a source after
 * a generated token): NaN tokens are skipped in sums, and a unit is NaN only if all its tokens are.
 *
 * @example
 *   const units = buildUnits({granularity: "word", wordIds, sentenceIds, turnIds, specialMask, showSpecial: false});
 *   const sums = unitScores(units, scores, target, nTokens);
 */

/**
 * Without `turnIds` (a view of a plain text), every non-special token is in turn 0.
 * @param {{granularity: "token" | "word" | "sentence" | "turn", wordIds: ArrayLike<number>,
 *          sentenceIds: ArrayLike<number>, turnIds?: ArrayLike<number> | null, specialMask: ArrayLike<number>,
 *          showSpecial: boolean}} options
 * @returns {number[][]}  token indices of each unit, in text order
 */
export function buildUnits({ granularity, wordIds, sentenceIds, turnIds, specialMask, showSpecial }) {
  const turns = turnIds ?? new Int8Array(specialMask.length);
  const ids = { token: null, word: wordIds, sentence: sentenceIds, turn: turns }[granularity];
  if (ids === undefined)
    throw new RangeError(`unknown granularity "${granularity}"; use token, word, sentence or turn`);
  const units = [];
  const unitOfId = new Map();
  for (let i = 0; i < specialMask.length; i += 1) {
    const special = specialMask[i] !== 0;
    if (special && !showSpecial) continue;
    const id = ids === null || special || ids[i] < 0 ? null : ids[i];
    if (id !== null && unitOfId.has(id)) units[unitOfId.get(id)].push(i);
    else {
      if (id !== null) unitOfId.set(id, units.length);
      units.push([i]);
    }
  }
  return units;
}

/**
 * Sum of each unit's token scores for one target row of a row-major (nTargets × nTokens) matrix.
 * @returns {Float64Array}
 */
export function unitScores(units, scores, target, nTokens) {
  const base = target * nTokens;
  const sums = new Float64Array(units.length);
  units.forEach((unit, u) => {
    let seen = false;
    for (const i of unit) {
      const value = scores[base + i];
      if (Number.isNaN(value)) continue;
      sums[u] += value;
      seen = true;
    }
    if (!seen) sums[u] = Number.NaN;
  });
  return sums;
}

/** Largest |value| ignoring NaN (0 when there is none). */
export function maxMagnitude(values) {
  let max = 0;
  for (const value of values) if (Math.abs(value) > max) max = Math.abs(value);
  return max;
}

/**
 * Largest |value| over content entries only (`special[i] === 0`), ignoring NaN: the colour scale of a chat view,
 * whose template and role-marker tokens (hidden, or shown greyed) must not set it. Falls back to every entry when
 * there is no content entry.
 * @param {ArrayLike<number>} values
 * @param {ArrayLike<number | boolean>} special  1/true for a special (template) entry, aligned with `values`
 * @example contentMaxMagnitude([5, -2, 1], [1, 0, 0]) // 2
 */
export function contentMaxMagnitude(values, special) {
  let max = 0;
  let content = false;
  for (let i = 0; i < values.length; i += 1) {
    if (special[i]) continue;
    content = true;
    if (Math.abs(values[i]) > max) max = Math.abs(values[i]);
  }
  return content ? max : maxMagnitude(values);
}

/**
 * 1-based rank of each value by decreasing |value| (ties share the better rank); NaN gets rank 0.
 * @param {ArrayLike<number>} values
 * @returns {Int32Array}
 */
export function ranksByMagnitude(values) {
  const order = Array.from(values, (_, i) => i)
    .filter((i) => !Number.isNaN(values[i]))
    .sort((a, b) => Math.abs(values[b]) - Math.abs(values[a]));
  const ranks = new Int32Array(values.length);
  order.forEach((index, position) => {
    const previous = order[position - 1];
    ranks[index] =
      position > 0 && Math.abs(values[previous]) === Math.abs(values[index]) ? ranks[previous] : position + 1;
  });
  return ranks;
}

/**
 * The source text of a unit: its tokens joined with the text between them (not the text before the first).
 * @param {number[]} unit  token indices
 * @param {string[]} tokens
 * @param {string[]} spaces  text before each token
 * @example unitText([1, 2], ["a", "un", "able"], ["", " ", ""]) // "unable"
 */
export function unitText(unit, tokens, spaces) {
  return unit.map((i, k) => (k > 0 ? spaces[i] : "") + tokens[i]).join("");
}

/**
 * Role of each unit that starts a chat turn, as `Map(unit index → role)`: where the turn of the unit's first
 * non-special token differs from the last turn seen. Empty without roles (a plain text). Mirrors `role_starts`
 * in interp_widgets/widgets/_tokens.py.
 * @param {number[][]} units
 * @param {ArrayLike<number>} turnIds
 * @param {ArrayLike<number>} specialMask
 * @param {string[]} roles
 * @example roleStarts([[0], [1], [2]], [0, 0, 1], [0, 0, 0], ["user", "assistant"]) // Map {0 => "user", 2 => "assistant"}
 */
export function roleStarts(units, turnIds, specialMask, roles) {
  const starts = new Map();
  if (!roles?.length || !turnIds) return starts;
  let previous = -1;
  units.forEach((unit, u) => {
    const i = unit.find((k) => specialMask[k] === 0 && turnIds[k] >= 0 && turnIds[k] < roles.length);
    if (i === undefined || turnIds[i] === previous) return;
    previous = turnIds[i];
    starts.set(u, roles[previous]);
  });
  return starts;
}
